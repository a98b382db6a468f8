#!/usr/bin/env bash
# weft-bench workloads for several weft builds side by side, in one sitting: every run of a
# workload alternates between the builds, so that load on the machine falls on all of them alike.
# Prints each line weft-bench prints, prefixed with the build's name, and then the medians.
#
#   bench/side-by-side.sh [--runs R] NAME=PATH/TO/weft-bench [NAME=PATH ...] -- WORKLOAD ARGS...
#
# Example (the house's before and after):
#   bench/side-by-side.sh --runs 5 before=/tmp/a/weft-bench after=target/release/weft-bench \
#     -- --durability normal react 100
set -euo pipefail

RUNS=3
BINS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    -h|--help) sed -n 2,11p "$0"; exit 0 ;;
    --) shift; break ;;
    *=*) BINS+=("$1"); shift ;;
    *) echo "side-by-side.sh: expected NAME=PATH, an option or --, got $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ ${#BINS[@]} -eq 0 ] || [ $# -eq 0 ]; then
  echo "side-by-side.sh: name the builds as NAME=PATH and the workload after -- (see --help)" >&2
  exit 2
fi

OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
for r in $(seq "$RUNS"); do
  for b in "${BINS[@]}"; do
    name=${b%%=*} bin=${b#*=}
    "$bin" --runs 1 "$@" | grep '^weft ' | sed "s/^/$name /" | tee -a "$OUT"
  done
done
echo "== medians of $RUNS runs (load $(cut -d' ' -f1-3 /proc/loadavg)): $*"
python3 - "$OUT" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(lambda: collections.defaultdict(list))
order = []
for line in open(sys.argv[1]):
    name, _weft, rest = line.split(" ", 2)
    head, _, figs = rest.partition(": ")
    key = (name, head)
    if key not in order:
        order.append(key)
    for f in figs.split():
        k, _, v = f.partition("=")
        runs[key][k].append(float(v))
for name, head in order:
    figs = " ".join(f"{k}={statistics.median(v):.3f}" for k, v in runs[(name, head)].items())
    print(f"{name:10} {head}: {figs}")
PY
