#!/usr/bin/env bash
# Queueing at speed: `weft submit AGENT --from FILE` of N runs (one JSON line each, a task and a
# small input) into a new PostgreSQL database and into a new SQLite file, R times each. The time
# is the whole command's (process start, agent file, reading and checking the lines, writing the
# sessions 1,000 to a write of the store); runs/s = N / time. Every run checks that N sessions
# were written. The durability is printed: PostgreSQL's `synchronous_commit`, and SQLite's
# (`normal`, weft's default, unless WEFT_BENCH_DURABILITY says `full`).
#
#   bench/submit.sh [--lines N] [--runs R]
#
# Environment: WEFT_BENCH_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/postgres): a
# database `weft_bench_submit` is created beside it for each run and dropped afterwards.
# WEFT_BIN: the weft binary (default target/release/weft, built if missing). Uses psql.
set -euo pipefail
cd "$(dirname "$0")/.."

lines=20000
runs=3
while [[ $# -gt 0 ]]; do
    case "$1" in
        --lines) lines="$2"; shift 2 ;;
        --runs) runs="$2"; shift 2 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
admin="${WEFT_BENCH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
durability="${WEFT_BENCH_DURABILITY:-normal}"
db_name=weft_bench_submit
db_url="${admin%/*}/$db_name"
if [[ -n "${WEFT_BIN:-}" ]]; then
    weft="$(realpath "$WEFT_BIN")"
else
    [[ -x target/release/weft ]] || cargo build --release -p weft
    weft="$PWD/target/release/weft"
fi
work="$(mktemp -d)"
cleanup() {
    psql "$admin" -Xq -c "DROP DATABASE IF EXISTS $db_name WITH (FORCE)" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

cat > "$work/echo.yaml" <<'EOF'
name: echo
mode: plan
model: scripted:plan.script.yaml
tools:
  - builtin: echo
EOF
echo "respond: [ { text: done } ]" > "$work/plan.script.yaml"
python3 - "$lines" > "$work/runs.jsonl" <<'EOF'
import json, sys
for k in range(int(sys.argv[1])):
    print(json.dumps({"task": f"post {k}", "input": {"k": k}, "user": f"u{k % 10}"}))
EOF

now() { date +%s.%N; }
secs() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.3f}')" "$1" "$2"; }

# One run into $1 (a database URL or a file): prints the seconds it took.
one_run() {
    local db="$1" start end written
    start="$(now)"
    (cd "$work" && "$weft" --db "$db" --durability "$durability" submit echo.yaml --from runs.jsonl >"$work/ids" 2>"$work/submit.log") ||
        { cat "$work/submit.log" >&2; exit 1; }
    end="$(now)"
    written="$(wc -l < "$work/ids")"
    [[ "$written" == "$lines" ]] || { echo "$written of $lines ids printed" >&2; exit 1; }
    secs "$start" "$end"
}

echo "weft submit --from: $lines runs per run, $runs runs; $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)"
for store in postgres sqlite; do
    times=()
    for _ in $(seq 1 "$runs"); do
        if [[ "$store" == postgres ]]; then
            PGOPTIONS='-c client_min_messages=warning' psql "$admin" -Xq -c "DROP DATABASE IF EXISTS $db_name WITH (FORCE)" >/dev/null
            psql "$admin" -Xq -c "CREATE DATABASE $db_name" >/dev/null
            t="$(one_run "$db_url")"
            n="$(psql "$db_url" -XAtq -c "SELECT count(*) FROM sessions")"
            sync_commit="$(psql "$db_url" -XAtq -c "SHOW synchronous_commit")"
        else
            rm -f "$work/q.db" "$work/q.db-wal" "$work/q.db-shm"
            t="$(one_run "$work/q.db")"
            n="$(cd "$work" && "$weft" --db q.db sessions list --json --limit 1000000 | wc -l)"
        fi
        [[ "$n" == "$lines" ]] || { echo "$store: $n sessions stored, $lines expected" >&2; exit 1; }
        times+=("$t")
    done
    median="$(printf '%s\n' "${times[@]}" | sort -n | sed -n "$(( (runs + 1) / 2 ))p")"
    if [[ "$store" == postgres ]]; then
        what="PostgreSQL (durability $durability; server synchronous_commit=$sync_commit)"
    else
        what="SQLite (durability $durability)"
    fi
    printf '%-60s runs (s): %s  median %s s  %s runs/s\n' "$what" "${times[*]}" "$median" \
        "$(python3 -c "import sys; print(round(int(sys.argv[1]) / float(sys.argv[2])))" "$lines" "$median")"
done
