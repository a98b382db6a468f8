#!/usr/bin/env bash
# `weft serve` against LangGraph's own server (`langgraph dev`, in-memory runtime), side by side
# in one run: N concurrent streaming runs of a ReAct agent whose scripted model calls `echo` three
# times (50 ms per model call) and then answers, each run in its own new thread.
#
#   bench/serve.sh [--n 1000] [--parts "floor sdk rust pg langgraph"] [--only weft|langgraph]
#
# Parts (all by default):
#   floor      the Rust generator against `weft-bench serve-floor`, a server that answers the two
#              requests with nothing behind them (the agent's updates, 50 ms per model turn): what
#              the machine and the generator allow, below which no server can go here
#   sdk        weft serve driven by the official Python langgraph-sdk (bench/serve_stream.py):
#              a SQLite file (durability full, the default) and `--db memory:`
#   rust       weft serve driven by the Rust load generator (`weft-bench serve-load`), which is
#              light enough not to bound the server: SQLite at durability full, at normal, and
#              `--db memory:` (no durability, as `langgraph dev`)
#   pg         two weft serve replicas on one PostgreSQL database (created for the run and dropped
#              after it; durability full), the generator spreading runs round-robin over both
#   langgraph  `langgraph dev` driven by its own Python client (serve_stream.py), then by the Rust
#              generator
# `--only weft` is `--parts "floor sdk rust pg"`, `--only langgraph` is `--parts langgraph`.
#
# Each part prints its figures (a table, then one JSON line); the end prints a Markdown table of
# them all. Server peak memory is VmHWM from /proc, server CPU the seconds it used during the
# batch; client CPU is the load generator's own (Python: getrusage; Rust: /proc/self/stat).
#
# Builds target/release/weft and weft-bench when missing. Needs scripts/setup-clients (the SDK),
# psql and PostgreSQL for `pg` (WEFT_BENCH_POSTGRES_URL, default
# postgres://postgres@127.0.0.1:5432/postgres: a database weft_bench_serve is created beside it)
# and, for the peer, a venv with `langgraph-cli[inmem]` (LANGGRAPH_VENV, default
# ~/.cache/weft/lg-venv; created when missing) and ../shared/bench/langgraph-server beside the
# repository.
set -euo pipefail
cd "$(dirname "$0")/.."

n=1000
parts="floor sdk rust pg langgraph"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --n) n="$2"; shift 2 ;;
        --parts) parts="$2"; shift 2 ;;
        --only)
            case "$2" in
                weft) parts="floor sdk rust pg" ;;
                langgraph) parts="langgraph" ;;
                *) echo "--only takes weft or langgraph, not $2" >&2; exit 2 ;;
            esac
            shift 2 ;;
        *) echo "unknown argument $1 (see the comment at the top of $0)" >&2; exit 2 ;;
    esac
done
for p in $parts; do
    case "$p" in
        floor|sdk|rust|pg|langgraph) ;;
        *) echo "unknown part $p: the parts are floor, sdk, rust, pg and langgraph" >&2; exit 2 ;;
    esac
done
has() { [[ " $parts " == *" $1 "* ]]; }

if [[ ! -x target/release/weft || ! -x target/release/weft-bench ]]; then
    cargo build --release -p weft -p weft-bench
fi
gen=target/release/weft-bench
work="$(mktemp -d)"
pids=()
admin="${WEFT_BENCH_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
db_name=weft_bench_serve
db_url="${admin%/*}/$db_name"
cleanup() {
    for p in "${pids[@]}"; do kill -- "$p" 2>/dev/null || true; done
    if has pg; then
        psql "$admin" -Xq -c "DROP DATABASE IF EXISTS $db_name WITH (FORCE)" >/dev/null 2>&1 || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
key="bench-key-0123456789abcdef"
echo "$key bench" > "$work/keys"
results="$work/results.tsv"
: > "$results"

echo "bench/serve.sh --n $n --parts \"$parts\": $(date -u '+%Y-%m-%d %H:%M:%S UTC'), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

wait_up() {
    for _ in $(seq 1 300); do
        curl -s -m 1 "$1" >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    echo "server at $1 did not come up" >&2
    return 1
}

# Runs a command printing the figures (its last line is one JSON object) and files them under a
# label for the closing table.
record() {
    local label="$1"; shift
    echo "== $label (load $(cut -d' ' -f1 /proc/loadavg))"
    "$@" | tee "$work/out"
    printf '%s\t%s\n' "$label" "$(tail -1 "$work/out")" >> "$results"
}

# Starts `weft serve` on a port with the given options; sets $server.
start_weft() {
    local port="$1"; shift
    target/release/weft "$@" serve --agents bench/serve-agent --keys "$work/keys" \
        --listen "127.0.0.1:$port" --max-runs-per-user 100000 2>>"$work/weft-$port.log" &
    server=$!
    pids+=("$server")
    wait_up "http://127.0.0.1:$port/health"
}

stop() {
    kill -TERM "$@" 2>/dev/null || true
    for p in "$@"; do wait "$p" 2>/dev/null || true; done
}

rust_client() {
    "$gen" serve-load --n "$n" --api-key "$key" --assistant agent \
        --expect "done after 3 echo calls" "$@"
}

if has floor; then
    "$gen" serve-floor --addr 127.0.0.1:2128 2>>"$work/floor.log" &
    floor=$!
    pids+=("$floor")
    for _ in $(seq 1 100); do
        ss -ltnH 'sport = :2128' | grep -q . && break
        sleep 0.1
    done
    record "floor: serve-floor (no server work); Rust generator" rust_client \
        --url http://127.0.0.1:2128 --server-pid "$floor"
    stop "$floor"
fi

if has sdk; then
    eval "$(scripts/setup-clients)"
    py="$WEFT_TEST_SDK_PYTHON"
    for setting in "SQLite full|--db $work/sdk.db" "memory|--db memory:"; do
        label="${setting%%|*}"
        # shellcheck disable=SC2086
        start_weft 2125 ${setting#*|}
        record "weft serve, $label; Python SDK" "$py" bench/serve_stream.py \
            --url http://127.0.0.1:2125 --assistant agent --final "done after 3 echo calls" \
            --n "$n" --api-key "$key" --server-pid "$server"
        stop "$server"
    done
fi

if has rust; then
    for setting in "SQLite full|--db $work/full.db --durability full" \
        "SQLite normal|--db $work/normal.db --durability normal" "memory|--db memory:"; do
        label="${setting%%|*}"
        # shellcheck disable=SC2086
        start_weft 2125 ${setting#*|}
        record "weft serve, $label; Rust generator" rust_client \
            --url http://127.0.0.1:2125 --server-pid "$server"
        stop "$server"
    done
fi

if has pg; then
    psql "$admin" -Xq -c "DROP DATABASE IF EXISTS $db_name WITH (FORCE)" >/dev/null
    psql "$admin" -Xq -c "CREATE DATABASE $db_name" >/dev/null
    start_weft 2126 --db "$db_url" --durability full
    a=$server
    start_weft 2127 --db "$db_url" --durability full
    b=$server
    # PostgreSQL shares the machine: its processes' CPU during the batch is printed beside the
    # replicas' (user + system ticks of every `postgres` process, from /proc).
    pg_cpu() {
        local t=0 p
        for p in $(pgrep -x postgres); do
            t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
        done
        echo "$t"
    }
    before=$(pg_cpu)
    record "2 weft serve replicas, PostgreSQL full; Rust generator" rust_client \
        --url http://127.0.0.1:2126 --url http://127.0.0.1:2127 --server-pid "$a" --server-pid "$b"
    echo "PostgreSQL's processes used $(python3 -c "print(round(($(pg_cpu) - $before) / $(getconf CLK_TCK), 2))") s of CPU during that batch"
    stop "$a" "$b"
fi

if has langgraph; then
    eval "$(scripts/setup-clients)"
    py="$WEFT_TEST_SDK_PYTHON"
    venv="${LANGGRAPH_VENV:-$HOME/.cache/weft/lg-venv}"
    if [[ ! -x "$venv/bin/langgraph" ]]; then
        python3 -m venv "$venv"
        "$venv/bin/pip" install --quiet "langgraph-cli[inmem]" langgraph-sdk
    fi
    peer=../shared/bench/langgraph-server
    "$venv/bin/langgraph" --version 2>/dev/null | head -1 || true
    # A fresh server for each client: one that holds the first batch's threads is slower.
    start_peer() {
        pgid="$(VENV="$venv" PORT=2124 "$peer/start_server.sh" "$work/langgraph.log" --n-jobs-per-worker 100)"
        pids+=("-$pgid")
        pid="$(ss -ltnpH 'sport = :2124' | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2)"
    }
    stop_peer() {
        kill -- "-$pgid" 2>/dev/null || true
        for _ in $(seq 1 150); do
            ss -ltnH 'sport = :2124' | grep -q . || return 0
            sleep 0.2
        done
        echo "langgraph dev did not stop within 30 s" >&2
        return 1
    }
    start_peer
    record "langgraph dev (memory), --n-jobs-per-worker 100; Python SDK" "$py" bench/serve_stream.py \
        --url http://127.0.0.1:2124 --assistant agent \
        --final "done after 3 echo calls" --n "$n" --server-pid "$pid"
    stop_peer
    start_peer
    record "langgraph dev (memory), --n-jobs-per-worker 100; Rust generator" rust_client \
        --url http://127.0.0.1:2124 --server-pid "$pid"
    stop_peer
fi

echo "end: $(date -u '+%Y-%m-%d %H:%M:%S UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo
python3 - "$results" <<'EOF'
import json, sys
rows = [line.rstrip("\n").split("\t", 1) for line in open(sys.argv[1]) if line.strip()]
def s(v, scale=1.0, fmt=None):
    if v is None:
        return "-"
    v *= scale
    return (fmt or ("{:.0f}" if v >= 100 else "{:.3g}")).format(v)
# runs/s against `langgraph dev` driven by its own client, when that part ran.
peer = [json.loads(js) for label, js in rows if label.startswith("langgraph dev") and "Python SDK" in label]
peer_rate = peer[0]["ok"] / peer[0]["wall_s"] if peer and peer[0]["ok"] else None
def times(r):
    return "-" if not peer_rate else f"{r['ok'] / r['wall_s'] / peer_rate:.1f}×"
print("| run | ok / n | wall s | runs/s | ÷ langgraph dev (own client) | first event p50 ms | p99 ms | end of stream p50 ms | p99 ms | server peak MB | server CPU s | client CPU s |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for label, js in rows:
    r = json.loads(js)
    print(f"| {label} | {r['ok']} / {r['n']} | {s(r['wall_s'])} | {s(r['runs_per_s'], fmt='{:.1f}')} | {times(r)} "
          f"| {s(r['first_p50_s'], 1000)} | {s(r['first_p99_s'], 1000)} "
          f"| {s(r['total_p50_s'], 1000)} | {s(r['total_p99_s'], 1000)} "
          f"| {s(r.get('server_peak_mb'))} | {s(r.get('server_cpu_s'))} | {s(r.get('client_cpu_s'))} |")
    if r.get("errors"):
        print(f"|  failures: {json.dumps(r['errors'])[:300]} |")
print()
print("Where the first event's time goes (Rust generator; from a run's start, p50 / p99 ms):")
print()
print("| run | thread created | stream head | first event |")
print("|---|---:|---:|---:|")
for label, js in rows:
    r = json.loads(js)
    if "thread_p50_s" in r:
        cell = lambda a, b: f"{s(r[a], 1000)} / {s(r[b], 1000)}"
        print(f"| {label} | {cell('thread_p50_s', 'thread_p99_s')} | {cell('head_p50_s', 'head_p99_s')} "
              f"| {cell('first_p50_s', 'first_p99_s')} |")
EOF
