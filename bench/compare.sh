#!/usr/bin/env bash
# weft against LangGraph, side by side, in one run.
#
#   bench/compare.sh [--runs R] [--full] [--only react|concurrent|growth|plan|resume]
#
# Creates bench/.venv with LangGraph (once), builds weft-bench in release, runs every workload
# R times for both (default 3) and prints a table of medians: workload, figure, weft, LangGraph,
# and the ratio LangGraph / weft (how many times more LangGraph takes; for runs/s, weft / LangGraph).
# `--full` adds `concurrent 10000 3`, which takes LangGraph minutes.
#
# The peer script is ../shared/bench/langgraph_bench.py beside the repository, or $LANGGRAPH_BENCH.
set -euo pipefail

ROOT=$(git rev-parse --show-toplevel)
RUNS=3
FULL=0
ONLY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --full) FULL=1; shift ;;
    --only) ONLY="$2"; shift 2 ;;
    -h|--help) sed -n 2,12p "$0"; exit 0 ;;
    *) echo "compare.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

PEER="$ROOT/../shared/bench/langgraph_bench.py"
if [ ! -f "$PEER" ]; then
  PEER="${LANGGRAPH_BENCH:-}"
fi
if [ -z "$PEER" ] || [ ! -f "$PEER" ]; then
  echo "compare.sh: the LangGraph script is not at $ROOT/../shared/bench/langgraph_bench.py; set LANGGRAPH_BENCH to its path" >&2
  exit 2
fi

VENV="$ROOT/bench/.venv"
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import langgraph.prebuilt, langgraph.checkpoint.sqlite, aiosqlite' 2>/dev/null; then
  echo "== creating $VENV with LangGraph" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --upgrade pip
  "$VENV/bin/pip" install --quiet langgraph langgraph-checkpoint-sqlite aiosqlite
fi
PY="$VENV/bin/python"

echo "== building weft-bench (release)" >&2
(cd "$ROOT" && cargo build --quiet --release -p weft-bench)
WEFT="$ROOT/target/release/weft-bench"

OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT

want() { [ -z "$ONLY" ] || [ "$ONLY" = "$1" ]; }

weft() {
  echo "== weft-bench $* --runs $RUNS" >&2
  "$WEFT" "$@" --runs "$RUNS" | tee -a "$OUT" >&2
}

peer() {
  for _ in $(seq "$RUNS"); do
    echo "== langgraph $*" >&2
    "$PY" "$PEER" "$@" | tee -a "$OUT" >&2
  done
}

if want react; then
  for n in 10 100 400; do
    weft react "$n"
    peer react "$n" sqlite
  done
fi
if want concurrent; then
  weft concurrent 1000 3
  peer concurrent 1000 3
  if [ "$FULL" = 1 ]; then
    weft concurrent 10000 3
    peer concurrent 10000 3
  fi
fi
if want growth; then
  weft growth 100
  peer growth 100
fi
if want plan; then
  weft plan 10000
fi
if want resume; then
  weft resume 10000
fi

"$PY" - "$OUT" <<'PYEOF'
import re, statistics, sys
from collections import defaultdict

lines = open(sys.argv[1]).read().splitlines()
weft = {}                    # label -> {key: value} (already medians)
peer = defaultdict(lambda: defaultdict(list))  # workload -> key -> [values]

for l in lines:
    m = re.match(r"weft (.+?): (.*?)( \(median of \d+\))?$", l)
    if m:
        weft[m.group(1)] = {k: float(v) for k, v in re.findall(r"(\w+)=([-\d.e]+)", m.group(2))}
        continue
    m = re.match(r"langgraph react n=(\d+) saver=sqlite: ([\d.]+) ms total, (\d+) us/iteration, db ([\d.]+) MB", l)
    if m:
        w = f"react {m.group(1)}"
        peer[w]["total_ms"].append(float(m.group(2)))
        peer[w]["us_per_iter"].append(float(m.group(3)))
        peer[w]["db_mb"].append(float(m.group(4)))
        continue
    m = re.match(r"langgraph concurrent m=(\d+) k=(\d+): ([\d.]+) s wall \(ideal ([\d.]+) s\), (\d+) runs/s, rss (\d+) MB", l)
    if m:
        w = f"concurrent {m.group(1)} {m.group(2)}"
        peer[w]["wall_s"].append(float(m.group(3)))
        peer[w]["x_ideal"].append(float(m.group(3)) / float(m.group(4)))
        peer[w]["runs_per_s"].append(float(m.group(5)))
        peer[w]["rss_mb"].append(float(m.group(6)))
        continue
    m = re.match(r"langgraph growth turns=(\d+): db ([\d.]+) MB, last-turn avg ([\d.]+) ms/turn", l)
    if m:
        w = f"growth {m.group(1)}"
        peer[w]["db_mb"].append(float(m.group(2)))
        peer[w]["ms_per_turn"].append(float(m.group(3)))

def weft_for(w):
    kind, *args = w.split()
    for label, figs in weft.items():
        parts = label.split()
        if parts[0] != kind:
            continue
        vals = [p.split("=", 1)[1] for p in parts[1:] if "=" in p and p.split("=", 1)[0] in ("n", "m", "k", "turns", "events")]
        if vals[: len(args)] == args:
            yield label, figs

rows = []
shown = set()
for w, figs in peer.items():
    for label, wf in weft_for(w):
        shown.add(label)
        for key, vals in figs.items():
            lg = statistics.median(vals)
            we = wf.get(key)
            if we is None:
                continue
            higher_is_better = key == "runs_per_s"
            if higher_is_better:
                ratio = we / lg if lg else float("inf")
            else:
                ratio = lg / we if we else float("inf")
            rows.append((w, key, we, lg, ratio))
for label, wf in weft.items():
    if label in shown:
        continue
    for key, we in wf.items():
        rows.append((label, key, we, None, None))

def fmt(v):
    if v is None:
        return "-"
    if v == float("inf"):
        return "inf"
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"

print()
print(f"{'workload':<34} {'figure':<22} {'weft':>10} {'LangGraph':>10} {'LG/weft':>9}")
for w, key, we, lg, ratio in rows:
    print(f"{w:<34} {key:<22} {fmt(we):>10} {fmt(lg):>10} {fmt(ratio) + ('x' if ratio else ''):>9}")
PYEOF
