#!/usr/bin/env bash
# Throughput of `weft worker` on PostgreSQL with 1, 2 and 4 worker processes on the same work:
# N sessions of a three-step plan (three calls of a command tool, five scripted model replies),
# queued with `weft submit` before the workers start. A run's time is from the workers' start to
# the moment every session has ended (polled every 50 ms); sessions per second = N / time.
#
#   bench/workers.sh [--sessions N] [--concurrency C] [--runs R] [--workers "1 2 4"]
#
# Environment: WEFT_BENCH_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/postgres): a
# database `weft_bench_workers` is created beside it for each run and dropped afterwards.
# Uses target/release/weft (built if missing) and psql.
set -euo pipefail
cd "$(dirname "$0")/.."

sessions=500
concurrency=8
runs=3
counts="1 2 4"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --sessions) sessions="$2"; shift 2 ;;
        --concurrency) concurrency="$2"; shift 2 ;;
        --runs) runs="$2"; shift 2 ;;
        --workers) counts="$2"; shift 2 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done

admin="${WEFT_BENCH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
db_name=weft_bench_workers
db_url="${admin%/*}/$db_name"
[[ -x target/release/weft ]] || cargo build --release -p weft
weft="$PWD/target/release/weft"

work="$(mktemp -d)"
trap 'rm -rf "$work"; psql "$admin" -Xq -c "DROP DATABASE IF EXISTS $db_name WITH (FORCE)" >/dev/null 2>&1 || true' EXIT
cat > "$work/ledger.yaml" <<'EOF'
name: ledger
mode: plan
model: scripted:ledger.script.yaml
review_responses: false
tools:
  - name: post
    description: Posts an entry to the ledger (not idempotent).
    command: ["sh", "-c", "cat > /dev/null; echo \"$WEFT_SESSION_ID $WEFT_STEP_ID\" >> ledger.txt; echo '{\"ok\": true}'"]
    input_schema: { type: object, properties: { entry: { type: string } }, required: [entry] }
EOF
cat > "$work/ledger.script.yaml" <<'EOF'
plan:
  - json: { plan: [ { _id: a, _tool: post, entry: "a" }, { _id: b, _tool: post, entry: "b" }, { _id: c, _tool: post, entry: "c", _dependsOn: [a, b] } ] }
review:
  - json: { decision: CONTINUE }
  - json: { decision: CONTINUE }
  - json: { decision: FINAL_RESPONSE }
respond:
  - text: "Posted."
EOF

now() { date +%s.%N; }

one_run() {
    local workers="$1"
    psql "$admin" -Xq -c "DROP DATABASE IF EXISTS $db_name WITH (FORCE)" >/dev/null
    psql "$admin" -Xq -c "CREATE DATABASE $db_name" >/dev/null
    rm -f "$work/ledger.txt"
    (cd "$work" && seq 1 "$sessions" | xargs -P 4 -I{} "$weft" --db "$db_url" submit ledger.yaml "post {}" >/dev/null 2>&1)
    local pids=() start end open
    start="$(now)"
    for _ in $(seq 1 "$workers"); do
        (cd "$work" && exec "$weft" --db "$db_url" worker --agents ledger.yaml \
            --concurrency "$concurrency" --poll-secs 0.2 2>/dev/null) &
        pids+=("$!")
    done
    while :; do
        open="$(psql "$db_url" -XAtq -c "SELECT count(*) FROM sessions WHERE status NOT IN ('completed', 'failed')")"
        [[ "$open" == 0 ]] && break
        sleep 0.05
    done
    end="$(now)"
    kill -TERM "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
    local lines
    lines="$(wc -l < "$work/ledger.txt")"
    [[ "$lines" == $((sessions * 3)) ]] || { echo "ledger has $lines lines, not $((sessions * 3))" >&2; exit 1; }
    awk -v s="$start" -v e="$end" -v n="$sessions" 'BEGIN { printf "%.3f %.1f\n", e - s, n / (e - s) }'
}

printf 'weft worker throughput: %s sessions of a 3-step plan, --concurrency %s per worker, PostgreSQL, median of %s runs\n' \
    "$sessions" "$concurrency" "$runs"
printf '| workers | wall s | sessions/s | runs (s) |\n|---:|---:|---:|---|\n'
for w in $counts; do
    times=()
    for _ in $(seq 1 "$runs"); do
        times+=("$(one_run "$w" | cut -d' ' -f1)")
    done
    median="$(printf '%s\n' "${times[@]}" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')"
    rate="$(awk -v t="$median" -v n="$sessions" 'BEGIN { printf "%.0f", n / t }')"
    printf '| %s | %s | %s | %s |\n' "$w" "$median" "$rate" "${times[*]}"
done
