#!/usr/bin/env bash
# Throughput of `weft worker` on PostgreSQL with 1, 2 and 4 worker processes on the same work:
# N sessions of a three-step plan (three tool calls, five scripted model replies), queued with
# `weft submit --from` before the workers start. A run's time is from the workers' start to the moment
# every session has ended (polled every 50 ms over one connection); sessions per second = N / time.
#
# Two variants of the tool (--tool, default both, one table each):
#   command  a declared command tool that is not idempotent: a `sh` process per call, in the
#            sandbox, appending a line to a ledger file; every run checks three lines per session
#   echo     the built-in `echo` tool, in the worker's process; every run checks three
#            `tool_call_finished` events per session in the database
#
# Per session, each table gives the workers' CPU (utime+stime of the worker processes and of the
# children they reaped, from /proc, read when the last session ended) and PostgreSQL's: the CPU of
# the backends serving the bench database (from /proc, by their pids in pg_stat_activity, looked
# at every half second and when the last session ended; they all start after the workers do, and
# one that ends between two looks loses up to half a second), and, when the server's postmaster is
# a process on this machine, the whole cluster's (the postmaster, its live children and the ones
# it reaped, before/after: WAL writer, checkpointer and other users of the server included; on a
# shared server that is noise); and the commits made and connections opened in the bench database
# (pg_stat_database xact_commit and sessions, after the workers have exited, less the poller's
# own). The durability is PostgreSQL's `synchronous_commit`, printed with the tables.
#
# --profile starts a PostgreSQL cluster of the script's own (initdb in a temp dir, a free port,
# shared_preload_libraries=pg_stat_statements; as root its programs run as the OS user postgres)
# instead of using WEFT_BENCH_POSTGRES_URL, and after each table prints, for the last run of each
# worker count, the statements PostgreSQL ran for the workers (pg_stat_statements, reset when the
# workers start): calls per session, rows, execution time, by statement.
#
#   bench/workers.sh [--sessions N] [--concurrency C] [--runs R] [--workers "1 2 4"]
#                    [--tool echo|command|both] [--profile]
#
# Environment: WEFT_BENCH_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/postgres): a
# database `weft_bench_workers` is created beside it for each run and dropped afterwards.
# WEFT_BIN: the weft binary (default target/release/weft, built if missing). Uses psql; with
# --profile also initdb and pg_ctl.
set -euo pipefail
cd "$(dirname "$0")/.."

sessions=500
concurrency=8
runs=3
counts="1 2 4"
tools="command echo"
profile=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --sessions) sessions="$2"; shift 2 ;;
        --concurrency) concurrency="$2"; shift 2 ;;
        --runs) runs="$2"; shift 2 ;;
        --workers) counts="$2"; shift 2 ;;
        --tool)
            case "$2" in
                both) tools="command echo" ;;
                echo | command) tools="$2" ;;
                *) echo "--tool is echo, command or both, not $2" >&2; exit 2 ;;
            esac
            shift 2 ;;
        --profile) profile=1; shift ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done

admin="${WEFT_BENCH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
db_name=weft_bench_workers
if [[ -n "${WEFT_BIN:-}" ]]; then
    weft="$(realpath "$WEFT_BIN")"
else
    [[ -x target/release/weft ]] || cargo build --release -p weft
    weft="$PWD/target/release/weft"
fi

work="$(mktemp -d)"
pgtmp=""
# PostgreSQL's server programs refuse to run as root: then they run as the OS user postgres, in
# the cluster's directory (which that user owns), not in ours.
as_pg() {
    if [[ $(id -u) == 0 ]]; then
        (cd "$pgtmp" && runuser -u postgres -- "$@")
    else
        (cd "$pgtmp" && "$@")
    fi
}
cleanup() {
    psql "$admin" -Xq -c "DROP DATABASE IF EXISTS $db_name WITH (FORCE)" >/dev/null 2>&1 || true
    if [[ -n "$pgtmp" ]]; then
        as_pg pg_ctl -D "$pgtmp/data" -m immediate -w -t 60 stop >/dev/null 2>&1 || true
        rm -rf "$pgtmp"
    fi
    rm -rf "$work"
}
trap cleanup EXIT

if [[ "$profile" == 1 ]]; then
    pgtmp="$(mktemp -d /tmp/weft-bench-workers-pg.XXXXXX)"
    [[ $(id -u) != 0 ]] || chown postgres: "$pgtmp"
    pgport="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    as_pg initdb -D "$pgtmp/data" -U postgres --auth=trust -E UTF8 >"$work/initdb.log" 2>&1 ||
        { cat "$work/initdb.log" >&2; exit 1; }
    as_pg pg_ctl -D "$pgtmp/data" -l "$pgtmp/server.log" -w -t 60 -o "-c listen_addresses=127.0.0.1 \
-c port=$pgport -c unix_socket_directories=$pgtmp -c max_connections=200 \
-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all \
-c pg_stat_statements.max=10000" start >"$work/pg_ctl.log" 2>&1 ||
        { cat "$work/pg_ctl.log" >&2; tail -20 "$pgtmp/server.log" >&2; exit 1; }
    admin="postgres://postgres@127.0.0.1:$pgport/postgres"
fi
db_url="${admin%/*}/$db_name"

cat > "$work/ledger.yaml" <<'EOF'
name: ledger
mode: plan
model: scripted:plan.script.yaml
review_responses: false
tools:
  - name: post
    description: Posts an entry to the ledger (not idempotent).
    command: ["sh", "-c", "cat > /dev/null; echo \"$WEFT_SESSION_ID $WEFT_STEP_ID\" >> ledger.txt; echo '{\"ok\": true}'"]
    input_schema: { type: object, properties: { entry: { type: string } }, required: [entry] }
    sandbox: { write: [.] }
EOF
cat > "$work/echo.yaml" <<'EOF'
name: echo
mode: plan
model: scripted:plan.script.yaml
review_responses: false
tools:
  - builtin: echo
    name: post
EOF
cat > "$work/plan.script.yaml" <<'EOF'
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
# Clock ticks of CPU of processes: user and system time (fields 14-15 of /proc/PID/stat), and with
# `all` also that of the children they reaped (16-17). Processes gone count 0.
ticks() {
    local fields="$1" t=0 p; shift
    for p in "$@"; do
        t=$((t + $(awk -v all="$fields" '{ print $14 + $15 + (all == "all" ? $16 + $17 : 0) }' "/proc/$p/stat" 2>/dev/null || echo 0)))
    done
    echo "$t"
}
hz="$(getconf CLK_TCK)"
# The postmaster of the server at $admin when it is a process on this machine (else empty), and
# the CPU of its cluster: its own and its reaped children's, and its live children's.
pg_port="$(python3 -c 'import sys, urllib.parse; print(urllib.parse.urlparse(sys.argv[1]).port or 5432)' "$admin")"
postmaster="$(ss -ltnpH "sport = :$pg_port" 2>/dev/null | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2 || true)"
cluster_ticks() {
    [[ -n "$postmaster" ]] || { echo 0; return; }
    echo $(($(ticks all "$postmaster") + $(ticks own $(pgrep -P "$postmaster"))))
}
# The bench database's commits and connections so far (pg_stat_database).
db_stats() {
    psql "$admin" -XAtq -F ' ' -c "SELECT xact_commit, sessions FROM pg_stat_database WHERE datname = '$db_name'"
}

# One run with $1 workers of tool $2: prints "wall_s worker_ticks backend_ticks cluster_ticks
# commits connections"; with --profile leaves the statements in $work/statements.$2.$1.
one_run() {
    local workers="$1" tool="$2" agent
    agent="$([[ "$tool" == command ]] && echo ledger.yaml || echo echo.yaml)"
    PGOPTIONS='-c client_min_messages=warning' psql "$admin" -Xq -c "DROP DATABASE IF EXISTS $db_name WITH (FORCE)" >/dev/null
    psql "$admin" -Xq -c "CREATE DATABASE $db_name" >/dev/null
    [[ "$profile" == 0 ]] || psql "$db_url" -Xq -c "CREATE EXTENSION pg_stat_statements" >/dev/null
    rm -f "$work/ledger.txt"
    (cd "$work" && seq 1 "$sessions" | sed 's/.*/{"task": "post &"}/' |
        "$weft" --db "$db_url" submit "$agent" --from - >/dev/null 2>"$work/submit.log") ||
        { cat "$work/submit.log" >&2; exit 1; }
    # One connection polls; its own statements, commits and connection are left out of the
    # figures. Every tenth poll it also lists the backends serving the workers, whose CPU is read
    # then (a backend that ends between two looks loses its last half second).
    # The submitting processes' backends have ended (and so reported their commits) first.
    local stats_before poll_in poll_out poller
    for _ in $(seq 1 50); do
        [[ "$(psql "$admin" -XAtq -c "SELECT numbackends FROM pg_stat_database WHERE datname = '$db_name'")" == 0 ]] && break
        sleep 0.1
    done
    sleep 0.2
    stats_before="$(db_stats)"
    coproc POLL { psql "$db_url" -XAtq 2>&1; }
    poll_in="${POLL[1]}" poll_out="${POLL[0]}" poller="$POLL_PID"
    ask() { echo "$1" >&"$poll_in"; read -r reply <&"$poll_out"; echo "$reply"; }
    local reply polls=0 looks=0 cluster_before
    local -A backend_ticks_of=()
    look() {
        local p
        for p in $(ask "SELECT string_agg(pid::text, ' ') /* bench-poll */ FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid();"); do
            backend_ticks_of[$p]="$(ticks own "$p")"
        done
        looks=$((looks + 1))
    }
    [[ "$profile" == 0 ]] || ask "SELECT 1 FROM pg_stat_statements_reset() /* bench-poll */;" >/dev/null
    cluster_before="$(cluster_ticks)"
    local pids=() start end open i
    start="$(now)"
    for i in $(seq 1 "$workers"); do
        (cd "$work" && exec "$weft" --db "$db_url" worker --agents "$agent" \
            --concurrency "$concurrency" --poll-secs 0.2 2>"$work/worker.$i.log") &
        pids+=("$!")
    done
    while :; do
        open="$(ask "SELECT count(*) /* bench-poll */ FROM sessions WHERE status NOT IN ('completed', 'failed');")"
        polls=$((polls + 1))
        [[ "$open" =~ ^[0-9]+$ ]] || { echo "polling failed: $open" >&2; exit 1; }
        [[ "$open" == 0 ]] && break
        ((polls % 10)) || look
        sleep 0.05
    done
    end="$(now)"
    local worker_ticks backend_ticks=0 cluster_after t
    worker_ticks="$(ticks all "${pids[@]}")"
    look
    cluster_after="$(cluster_ticks)"
    for t in "${backend_ticks_of[@]}"; do backend_ticks=$((backend_ticks + t)); done
    if [[ "$profile" == 1 ]]; then
        psql "$db_url" -Xq -c "\\copy (SELECT toplevel, calls, rows, round(total_exec_time::numeric, 1), regexp_replace(query, '\\s+', ' ', 'g') /* bench-poll */ FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND query NOT LIKE '%bench-poll%' ORDER BY calls DESC) TO '$work/statements.$tool.$workers' WITH (FORMAT csv)" >/dev/null
    fi
    kill -TERM "${pids[@]}" 2>/dev/null || true
    wait "${pids[@]}" 2>/dev/null || true
    # The poller ran $polls + $looks statements (+1 with --profile, and the copy of the
    # statements another, on a connection of its own), each its own transaction.
    exec {poll_in}>&-
    wait "$poller" 2>/dev/null || true
    sleep 0.2
    local made
    made="$(db_stats | awk -v b="$stats_before" -v own=$((polls + looks + 2 * profile)) -v conns=$((1 + profile)) \
        '{ split(b, x, " "); print $1 - x[1] - own, $2 - x[2] - conns }')"
    if [[ "$tool" == command ]]; then
        local lines
        lines="$(wc -l < "$work/ledger.txt")"
        [[ "$lines" == $((sessions * 3)) ]] || { echo "ledger has $lines lines, not $((sessions * 3))" >&2; tail -5 "$work"/worker.*.log >&2; exit 1; }
    else
        local right
        right="$(psql "$db_url" -XAtq -c "SELECT count(*) FROM (SELECT session_id FROM events WHERE type = 'tool_call_finished' GROUP BY session_id HAVING count(*) = 3) s")"
        [[ "$right" == "$sessions" ]] || { echo "$right sessions of $sessions have exactly 3 tool_call_finished events" >&2; tail -5 "$work"/worker.*.log >&2; exit 1; }
    fi
    echo "$(awk -v s="$start" -v e="$end" 'BEGIN { printf "%.3f", e - s }') $worker_ticks $backend_ticks $((cluster_after - cluster_before)) $made"
}

durability="$(psql "$admin" -XAtq -c "SHOW synchronous_commit")"
fsync="$(psql "$admin" -XAtq -c "SHOW fsync")"
version="$(psql "$admin" -XAtq -c "SHOW server_version")"
echo "bench/workers.sh --sessions $sessions --concurrency $concurrency --runs $runs --workers \"$counts\" --tool \"$tools\"$([[ $profile == 1 ]] && echo ' --profile'): $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "PostgreSQL $version at $(python3 -c 'import sys, urllib.parse; u = urllib.parse.urlparse(sys.argv[1]); print(f"{u.hostname}:{u.port or 5432}")' "$admin")$([[ $profile == 1 ]] && echo " (a cluster of the script's own, pg_stat_statements loaded)"), durability: synchronous_commit=$durability, fsync=$fsync"
[[ -n "$postmaster" ]] || echo "(the server's postmaster is not a process seen here: the cluster's CPU is not measured)"
for tool in $tools; do
    printf '\nweft worker, %s tool: %s sessions of a 3-step plan, --concurrency %s per worker, median of %s runs (by wall time)\n' \
        "$tool" "$sessions" "$concurrency" "$runs"
    printf '| workers | wall s | sessions/s | runs (s) | worker CPU ms/session | PG backends CPU ms/session | PG cluster CPU ms/session | commits/session | connections opened |\n'
    printf '|---:|---:|---:|---|---:|---:|---:|---:|---:|\n'
    for w in $counts; do
        results=()
        for _ in $(seq 1 "$runs"); do
            results+=("$(one_run "$w" "$tool")")
        done
        printf '%s\n' "${results[@]}" | sort -n | awk -v n="$sessions" -v hz="$hz" -v w="$w" '
            { line[NR] = $0; times = times (NR > 1 ? " " : "") $1 }
            END {
                split(line[int((NR + 1) / 2)], m, " ")
                ms = 1000 / hz / n
                printf "| %s | %s | %.0f | %s | %.2f | %.2f | %.2f | %.1f | %s |\n", w, m[1], n / m[1], times, m[2] * ms, m[3] * ms, m[4] * ms, m[5] / n, m[6]
            }'
        if [[ "$profile" == 1 ]]; then
            python3 - "$work/statements.$tool.$w" "$sessions" "$tool" "$w" <<'PY'
import csv, sys
path, n, tool, w = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
# A statement the client sent is one round trip (top level); a nested one (`toplevel` false) was
# run by PostgreSQL itself inside another, e.g. the foreign-key check of each inserted row.
rows = [(top == "t", int(c), int(r), float(t), q) for top, c, r, t, q in csv.reader(open(path))]
sent = [r for r in rows if r[0]]
calls = sum(r[1] for r in sent)
print(f"\nStatements the workers sent PostgreSQL, {w} worker(s), {tool} tool, the last run (pg_stat_statements): "
      f"{calls} in all, {calls / n:.1f} per session (each a round trip), "
      f"{sum(r[3] for r in sent) / n:.2f} ms of execution per session")
print("| calls/session | rows/call | exec ms/session | statement |\n|---:|---:|---:|---|")
for top, c, r, t, q in rows:
    if c / n < 0.05:
        continue
    q = q if len(q) <= 160 else q[:157] + "..."
    q = q.replace("|", "\\|")
    print(f"| {c / n:.2f} | {r / c:.1f} | {t / n:.3f} | {'' if top else '(nested) '}`{q}` |")
rest = [r for r in rows if r[1] / n < 0.05]
if rest:
    print(f"| {sum(r[1] for r in rest) / n:.2f} | | {sum(r[3] for r in rest) / n:.3f} | {len(rest)} other statements |")
PY
        fi
    done
done
echo "end: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"
