#!/usr/bin/env bash
# What the sandbox costs a tool call: a linear plan of N steps of one command tool (`cat`, which
# prints back the JSON it is given), run with `weft plan run` on the in-RAM store twice, once
# with the default sandbox and once with `sandbox: none` (which still starts the tool through
# the launcher, setting only the parent-death signal). The runs alternate so that load on the
# machine falls on both alike. Prints the median ms per step of each and their difference: the
# sandbox's own cost per call (a user namespace, rlimits, Landlock, seccomp).
#
#   bench/sandbox.sh [--steps N] [--runs R] [--weft PATH]   (default: target/release/weft)
set -euo pipefail

STEPS=200
RUNS=5
WEFT=target/release/weft
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    --weft) WEFT="$2"; shift 2 ;;
    -h|--help) sed -n 2,9p "$0"; exit 0 ;;
    *) echo "sandbox.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ ! -x "$WEFT" ]; then
  echo "sandbox.sh: no weft binary at $WEFT; build it (cargo build --release) or give --weft PATH" >&2
  exit 2
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
python3 - "$STEPS" "$WORK/plan.json" <<'PY'
import json, sys
n, path = int(sys.argv[1]), sys.argv[2]
steps = [{"_id": f"s{i}", "_tool": "cat", "n": i if i == 0 else f"†state.v{i-1}.n",
          "_outputPath": f"†state.v{i}"} for i in range(n)]
json.dump(steps, open(path, "w"))
PY
for kind in default none; do
  {
    echo "name: sandbox-bench"
    echo "mode: plan"
    echo "instructions: Run the plan."
    echo "tools:"
    echo "  - name: cat"
    echo "    description: Prints its arguments back."
    echo "    command: [cat]"
    echo "    idempotent: true"
    echo "    input_schema: { type: object, properties: { n: {} } }"
    [ "$kind" = none ] && echo "    sandbox: none"
    echo "limits:"
    echo "  max_waves: $((STEPS + 10))"
  } > "$WORK/$kind.yaml"
done

one() { # agent-file -> seconds
  local start end
  start=$(date +%s%N)
  "$WEFT" plan run "$WORK/plan.json" --agent "$1" --db memory: >/dev/null 2>"$WORK/err" || {
    echo "sandbox.sh: the run failed:" >&2; cat "$WORK/err" >&2; exit 1; }
  end=$(date +%s%N)
  echo $(( (end - start) / 1000 ))
}
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

: > "$WORK/default.t"; : > "$WORK/none.t"
one "$WORK/default.yaml" >/dev/null  # warm the page cache
for _ in $(seq "$RUNS"); do
  one "$WORK/default.yaml" >> "$WORK/default.t"
  one "$WORK/none.yaml" >> "$WORK/none.t"
done
d=$(median < "$WORK/default.t"); n=$(median < "$WORK/none.t")
printf 'weft %s, %d steps, %d runs each, load %s\n' "$WEFT" "$STEPS" "$RUNS" "$(cut -d' ' -f1 /proc/loadavg)"
awk -v d="$d" -v n="$n" -v s="$STEPS" 'BEGIN {
  printf "default sandbox   %.3f ms per step\n", d / s / 1000
  printf "sandbox: none     %.3f ms per step\n", n / s / 1000
  printf "sandbox cost      %.3f ms per call\n", (d - n) / s / 1000
}'
