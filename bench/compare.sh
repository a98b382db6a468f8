#!/usr/bin/env bash
# weft against LangGraph, side by side, in one run, at equal durability: both at `normal`
# (SQLite synchronous=NORMAL) and both at `full` (synchronous=FULL, a sync at every commit).
#
#   bench/compare.sh [--runs R] [--full] [--only react|tools|concurrent|growth|plan|resume]
#
# Creates bench/.venv with LangGraph (once), builds weft-bench in release, runs every workload
# R times for both (default 3) at each durability and prints a table of medians: workload,
# figure, then for normal and for full: weft, LangGraph, and the ratio LangGraph / weft (how many
# times more LangGraph takes; for runs/s, weft / LangGraph). The peer runs through
# bench/langgraph_peer.py, which sets its connections' synchronous, reads it back, and measures
# its storage as weft-bench does (database and write-ahead log, after a checkpoint).
# `--full` adds `concurrent 10000 3`, which takes LangGraph minutes. `plan` and `resume` are
# weft's alone, at full.
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
    -h|--help) sed -n 2,18p "$0"; exit 0 ;;
    *) echo "compare.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

. "$ROOT/bench/peer-env.sh" compare.sh

echo "== building weft-bench (release)" >&2
(cd "$ROOT" && cargo build --quiet --release -p weft-bench)
WEFT="$ROOT/target/release/weft-bench"

OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
echo "== load before: $(cut -d' ' -f1-3 /proc/loadavg); $(fsync_cost)" >&2

want() { [ -z "$ONLY" ] || [ "$ONLY" = "$1" ]; }

# weft D ARGS...: weft-bench at durability D; every line is tagged with D.
weft() {
  local d="$1"; shift
  echo "== weft-bench $* --durability $d --runs $RUNS" >&2
  "$WEFT" "$@" --durability "$d" --runs "$RUNS" | sed "s/^/[$d] /" | tee -a "$OUT" >&2
}

# peer D ARGS...: the peer at durability D, RUNS times.
peer() {
  local d="$1"; shift
  for _ in $(seq "$RUNS"); do
    echo "== langgraph $* ($d)" >&2
    "$PY" -W ignore "$ROOT/bench/langgraph_peer.py" "$d" "$@" | sed "s/^/[$d] /" | tee -a "$OUT" >&2
  done
}

for d in normal full; do
  if want react; then
    for n in 10 100 400; do
      weft "$d" react "$n"
      peer "$d" react "$n" sqlite
    done
  fi
  if want tools; then
    for t in ledger command; do
      weft "$d" react 100 --tool "$t"
      peer "$d" react_tool 100 "$t"
    done
  fi
  if want concurrent; then
    weft "$d" concurrent 1000 3
    peer "$d" concurrent 1000 3
    if [ "$FULL" = 1 ]; then
      weft "$d" concurrent 10000 3
      peer "$d" concurrent 10000 3
    fi
  fi
  if want growth; then
    weft "$d" growth 100
    peer "$d" growth 100
  fi
done
if want plan; then
  weft full plan 10000
fi
if want resume; then
  for e in 1000 10000 100000; do
    weft full resume "$e"
  done
fi
echo "== load after: $(cut -d' ' -f1-3 /proc/loadavg); $(fsync_cost)" >&2

"$PY" - "$OUT" <<'PYEOF'
import re, statistics, sys
from collections import defaultdict

lines = open(sys.argv[1]).read().splitlines()
weft = defaultdict(dict)                                   # d -> label -> {key: value}
peer = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))  # d -> workload -> key -> [v]
sync = defaultdict(set)                                    # d -> synchronous read back (peer)
last = {}                                                  # d -> workload of the last peer line

for l in lines:
    m = re.match(r"\[(\w+)\] (.*)", l)
    if not m:
        continue
    d, l = m.group(1), m.group(2)
    m = re.match(r"weft (.+?): (.*?)( \(median of \d+\))?$", l)
    if m:
        weft[d][m.group(1)] = {k: float(v) for k, v in re.findall(r"(\w+)=([-\d.e]+)", m.group(2))}
        continue
    m = re.match(r"langgraph react n=(\d+) saver=sqlite( tool=(\w+))?: ([\d.]+) ms total, (\d+) us/iteration", l)
    if m:
        w = f"react {m.group(1)}" + (f" {m.group(3)}" if m.group(3) else "")
        peer[d][w]["total_ms"].append(float(m.group(4)))
        peer[d][w]["us_per_iter"].append(float(m.group(5)))
        last[d] = w
        continue
    m = re.match(r"langgraph concurrent m=(\d+) k=(\d+): ([\d.]+) s wall \(ideal ([\d.]+) s\), (\d+) runs/s, rss (\d+) MB", l)
    if m:
        w = f"concurrent {m.group(1)} {m.group(2)}"
        peer[d][w]["wall_s"].append(float(m.group(3)))
        peer[d][w]["x_ideal"].append(float(m.group(3)) / float(m.group(4)))
        peer[d][w]["runs_per_s"].append(float(m.group(5)))
        peer[d][w]["rss_mb"].append(float(m.group(6)))
        last[d] = w
        continue
    m = re.match(r"langgraph growth turns=(\d+): db [\d.]+ MB, last-turn avg ([\d.]+) ms/turn", l)
    if m:
        w = f"growth {m.group(1)}"
        peer[d][w]["ms_per_turn"].append(float(m.group(2)))
        last[d] = w
        continue
    m = re.match(r"peer storage: sync=([\d,-]+) db_mb=([\d.]+)", l)
    if m and d in last:
        peer[d][last[d]]["db_mb"].append(float(m.group(2)))
        sync[d].add(m.group(1))

def weft_for(d, w):
    kind, *args = w.split()
    tool = None
    if kind == "react" and len(args) == 2:
        args, tool = args[:1], args[1]
    for label, figs in weft[d].items():
        parts = label.split()
        if parts[0] != kind:
            continue
        kv = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
        if kv.get("tool") != tool:
            continue
        vals = [kv[k] for k in ("n", "m", "k", "turns", "events") if k in kv]
        if vals[: len(args)] == args:
            return label, figs
    return None, None

def fmt(v):
    if v is None:
        return "-"
    if v == float("inf"):
        return "inf"
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"

def ratio(key, we, lg):
    if we is None or lg is None:
        return None
    if key == "runs_per_s":
        return we / lg if lg else float("inf")
    return lg / we if we else float("inf")

rows = []
workloads = list(dict.fromkeys(list(peer["normal"]) + list(peer["full"])))
shown = set()
for w in workloads:
    keys = list(dict.fromkeys(list(peer["normal"][w]) + list(peer["full"][w])))
    for key in keys:
        cells = []
        for d in ("normal", "full"):
            label, wf = weft_for(d, w)
            if label:
                shown.add((d, label))
            vals = peer[d][w].get(key)
            lg = statistics.median(vals) if vals else None
            we = wf.get(key) if wf else None
            cells += [we, lg, ratio(key, we, lg)]
        rows.append((w, key, cells))
for d in ("normal", "full"):
    for label, wf in weft[d].items():
        if (d, label) in shown:
            continue
        for key, we in wf.items():
            cells = [None] * 6
            cells[0 if d == "normal" else 3] = we
            rows.append((label, key, cells))

print()
print("synchronous read back from the peer's connections (2 FULL, 1 NORMAL): "
      + ", ".join(f"{d}: {'/'.join(sorted(sync[d])) or '-'}" for d in ("normal", "full")))
print(f"{'':<44} {'':<22} {'---------- normal ----------':>32} {'----------- full -----------':>32}")
print(f"{'workload':<44} {'figure':<22} {'weft':>10} {'LangGraph':>10} {'LG/weft':>10} {'weft':>10} {'LangGraph':>10} {'LG/weft':>10}")
for w, key, c in rows:
    out = [fmt(c[0]), fmt(c[1]), fmt(c[2]) + ("x" if c[2] else ""), fmt(c[3]), fmt(c[4]), fmt(c[5]) + ("x" if c[5] else "")]
    print(f"{w:<44} {key:<22} " + " ".join(f"{x:>10}" for x in out))
PYEOF
