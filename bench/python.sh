#!/usr/bin/env bash
# weft from Python (the `weft` package, crates/weft-py) against LangGraph, in one run, at equal
# durability: both at `normal` (SQLite synchronous=NORMAL) and both at `full` (synchronous=FULL).
#
#   bench/python.sh [--runs R] [--n N] [--calls C] [--skip-build]
#
# Creates bench/.venv with LangGraph and maturin (once), builds weft's Python package in release
# (maturin, target/wheels) and installs it there, then, R times (default 3) at each durability,
# each run in a fresh process and a fresh temporary directory:
#   tool C D     C Python tool calls through weft.plan.run (a plan of C independent steps),
#                against direct calls of the function (C defaults to 1000; also at `memory:`)
#   batch C D    the same C calls through a weft ReAct agent, asked for in one model reply
#   react N D    a weft ReAct agent built in Python, N iterations (N defaults to 100)
#   react_idem   the same with the tool declared idempotent
#   langgraph    bench/langgraph_peer.py D react N sqlite: LangGraph's prebuilt ReAct agent
# and prints a table of medians; for react, the ratio LangGraph / weft per iteration (how many
# times more LangGraph takes). The workloads are described in bench/python_bench.py.
#
# The peer script is ../shared/bench/langgraph_bench.py beside the repository, or $LANGGRAPH_BENCH.
set -euo pipefail

ROOT=$(git rev-parse --show-toplevel)
RUNS=3
N=100
CALLS=1000
BUILD=1
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --n) N="$2"; shift 2 ;;
    --calls) CALLS="$2"; shift 2 ;;
    --skip-build) BUILD=0; shift ;;
    -h|--help) sed -n 2,19p "$0"; exit 0 ;;
    *) echo "python.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

# The same venv as bench/compare.sh, with maturin besides LangGraph.
. "$ROOT/bench/peer-env.sh" python.sh
if [ "$("$VENV/bin/maturin" --version 2>/dev/null)" != "maturin 1.16.0" ]; then
  echo "== installing maturin 1.16.0 in $VENV" >&2
  "$VENV/bin/pip" install --quiet maturin==1.16.0
fi

if [ "$BUILD" = 1 ]; then
  echo "== building weft's Python package (release)" >&2
  rm -f "$ROOT"/target/wheels/weft-*.whl
  (cd "$ROOT" && nice "$VENV/bin/maturin" build --quiet --release -m crates/weft-py/Cargo.toml >&2)
  "$VENV/bin/pip" install --quiet --force-reinstall --no-deps "$ROOT"/target/wheels/weft-*.whl
fi
# The installed package, not crates/weft-py/python from the working directory.
cd "$ROOT/bench"
"$PY" -c 'import weft, os; print("== weft from", os.path.dirname(weft.__file__))' >&2

OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
echo "== uptime before: $(uptime); $(fsync_cost)" >&2

run() {
  local d="$1"; shift
  echo "== $*" >&2
  "$@" | sed "s/^/[$d] /" | tee -a "$OUT" >&2
}

for d in normal full; do
  for _ in $(seq "$RUNS"); do
    run "$d" "$PY" "$ROOT/bench/python_bench.py" tool "$CALLS" "$d"
    run "$d" "$PY" "$ROOT/bench/python_bench.py" batch "$CALLS" "$d"
    run "$d" "$PY" "$ROOT/bench/python_bench.py" react "$N" "$d"
    run "$d" "$PY" "$ROOT/bench/python_bench.py" react_idem "$N" "$d"
    run "$d" "$PY" -W ignore "$ROOT/bench/langgraph_peer.py" "$d" react "$N" sqlite
  done
done
for _ in $(seq "$RUNS"); do
  run memory "$PY" "$ROOT/bench/python_bench.py" tool "$CALLS" memory
  run memory "$PY" "$ROOT/bench/python_bench.py" batch "$CALLS" memory
done
echo "== uptime after: $(uptime); $(fsync_cost)" >&2

"$PY" - "$OUT" "$RUNS" <<'PYEOF'
import re, statistics, sys
from collections import defaultdict

lines = open(sys.argv[1]).read().splitlines()
runs = sys.argv[2]
figs = defaultdict(lambda: defaultdict(list))   # (workload, d) -> key -> [values]
sync = defaultdict(set)
last = {}
for l in lines:
    m = re.match(r"\[(\w+)\] (.*)", l)
    if not m:
        continue
    d, l = m.group(1), m.group(2)
    m = re.match(r"weft-py (\w+) n=(\d+) durability=\w+: (.*)", l)
    if m:
        w = f"weft {m.group(1)} {m.group(2)}"
        for k, v in re.findall(r"(\w+)=([-\d.e]+)", m.group(3)):
            figs[(w, d)][k].append(float(v))
        continue
    m = re.match(r"langgraph react n=(\d+) saver=sqlite: ([\d.]+) ms total, (\d+) us/iteration", l)
    if m:
        w = f"langgraph react {m.group(1)}"
        figs[(w, d)]["total_ms"].append(float(m.group(2)))
        figs[(w, d)]["us_per_iter"].append(float(m.group(3)))
        last[d] = w
        continue
    m = re.match(r"peer storage: sync=([\d,-]+) db_mb=([\d.]+)", l)
    if m and d in last:
        figs[(last[d], d)]["db_mb"].append(float(m.group(2)))
        sync[d].add(m.group(1))

def med(w, d, k):
    v = figs.get((w, d), {}).get(k)
    return statistics.median(v) if v else None

def fmt(v):
    if v is None:
        return "-"
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"

print()
print(f"medians of {runs} runs; synchronous read back from the peer's connections (2 FULL, 1 NORMAL): "
      + ", ".join(f"{d}: {'/'.join(sorted(sync[d])) or '-'}" for d in ("normal", "full")))
print(f"{'workload':<32} {'figure':<14} {'normal':>10} {'full':>10} {'memory':>10}")
order = []
for (w, d) in figs:
    if w not in order:
        order.append(w)
for w in order:
    keys = []
    for d in ("normal", "full", "memory"):
        for k in figs.get((w, d), {}):
            if k not in keys:
                keys.append(k)
    for k in keys:
        print(f"{w:<32} {k:<14} " + " ".join(f"{fmt(med(w, d, k)):>10}" for d in ("normal", "full", "memory")))
for w in order:
    if not (w.startswith("weft react ") or w.startswith("weft react_idem ")):
        continue
    peer = "langgraph react " + w.split()[-1]
    cells = []
    for d in ("normal", "full"):
        we, lg = med(w, d, "us_per_iter"), med(peer, d, "us_per_iter")
        cells.append(f"{lg / we:.1f}x" if we and lg else "-")
    print(f"{'LangGraph / ' + w:<32} {'us_per_iter':<14} " + " ".join(f"{c:>10}" for c in cells))
PYEOF
