#!/usr/bin/env bash
# A linear plan of N `echo` steps (each reads the one before through †state) through the command
# itself, `weft plan run`, on the in-RAM store and on SQLite at `normal`, for one or more weft
# binaries side by side: the runs alternate between the binaries so that load on the machine
# falls on all of them alike. Prints, per binary, the median µs per step of R runs of each.
#
#   bench/plan-run.sh [--steps N] [--runs R] NAME=PATH/TO/weft [NAME=PATH ...]
#
# The wall time includes starting the process, reading and validating the plan (twice: before
# the lease is taken and when the run starts) and the live view's output (sent to /dev/null).
set -euo pipefail

STEPS=10000
RUNS=5
BINS=()
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS="$2"; shift 2 ;;
    --runs) RUNS="$2"; shift 2 ;;
    -h|--help) sed -n 2,10p "$0"; exit 0 ;;
    *=*) BINS+=("$1"); shift ;;
    *) echo "plan-run.sh: expected NAME=PATH or an option, got $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ ${#BINS[@]} -eq 0 ]; then
  echo "plan-run.sh: name at least one binary, as NAME=PATH (see --help)" >&2
  exit 2
fi

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
python3 - "$STEPS" "$WORK/plan.json" <<'PY'
import json, sys
n, path = int(sys.argv[1]), sys.argv[2]
steps = [{"_id": f"s{i}", "_tool": "echo",
          "text": "†input.text" if i == 0 else f"†state.v{i-1}.text",
          "_outputPath": f"†state.v{i}"} for i in range(n)]
json.dump(steps, open(path, "w"))
PY
cat > "$WORK/agent.yaml" <<YAML
name: plan-bench
mode: plan
instructions: Run the plan.
tools:
  - builtin: echo
limits:
  max_waves: $((STEPS + 10))
  max_parallel: $STEPS
YAML

declare -A RESULTS
one() { # name binary store -> prints seconds
  local bin="$2" db="$3"
  local args=(--db "$db")
  if [ "$db" != "memory:" ]; then
    rm -f "$db" "$db"-wal "$db"-shm
    # Binaries from before `--durability` wrote SQLite at `normal` always.
    if "$bin" --help 2>/dev/null | grep -q -- '--durability'; then
      args+=(--durability normal)
    fi
  fi
  local t0 t1
  t0=$(date +%s.%N)
  if ! "$bin" "${args[@]}" plan run "$WORK/plan.json" --agent "$WORK/agent.yaml" \
      --input '{"text":"hello"}' >/dev/null 2>"$WORK/err"; then
    echo "plan-run.sh: $1 failed:" >&2
    tail -5 "$WORK/err" >&2
    exit 1
  fi
  t1=$(date +%s.%N)
  python3 -c "print(($t1-$t0)/$STEPS*1e6)"
}

for r in $(seq "$RUNS"); do
  for b in "${BINS[@]}"; do
    name=${b%%=*} bin=${b#*=}
    RESULTS[$name.memory]+="$(one "$name" "$bin" memory:) "
    RESULTS[$name.sqlite]+="$(one "$name" "$bin" "$WORK/weft.db") "
  done
done

printf '%-12s %14s %14s   (µs per step, median of %s; %s steps; load %s)\n' binary memory sqlite-normal "$RUNS" "$STEPS" "$(cut -d' ' -f1-3 /proc/loadavg)"
for b in "${BINS[@]}"; do
  name=${b%%=*}
  med() { python3 -c "import statistics,sys; v=[float(x) for x in sys.argv[1:]]; print(f'{statistics.median(v):.1f} ({min(v):.1f}-{max(v):.1f})')" $1; }
  printf '%-12s %14s %14s\n' "$name" "$(med "${RESULTS[$name.memory]}")" "$(med "${RESULTS[$name.sqlite]}")"
done
