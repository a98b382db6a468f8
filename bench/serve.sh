#!/usr/bin/env bash
# `weft serve` against LangGraph's own server (`langgraph dev`, in-memory runtime), side by side
# in one run: N concurrent streaming runs of a ReAct agent whose scripted model calls `echo` three
# times (50 ms per model call) and then answers, each run in its own new thread, driven by the
# same client script (bench/serve_stream.py, the official langgraph-sdk).
#
#   bench/serve.sh [--n 1000] [--only weft|langgraph]
#
# weft runs twice: on its durable default (a SQLite file) and on `--db memory:` (no durability,
# as `langgraph dev` keeps its state in memory). Needs scripts/setup-clients (the SDK) and, for
# the peer, a venv with `langgraph-cli[inmem]` (LANGGRAPH_VENV, default ~/.cache/weft/lg-venv;
# created when missing) and ../shared/bench/langgraph-server beside the repository.
set -euo pipefail
cd "$(dirname "$0")/.."

n=1000
only=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --n) n="$2"; shift 2 ;;
        --only) only="$2"; shift 2 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done

eval "$(scripts/setup-clients)"
py="$WEFT_TEST_SDK_PYTHON"
[[ -x target/release/weft ]] || cargo build --release -p weft
work="$(mktemp -d)"
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -- "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
key="bench-key-0123456789abcdef"
echo "$key bench" > "$work/keys"

wait_up() {
    for _ in $(seq 1 300); do
        curl -s -m 1 "$1" >/dev/null 2>&1 && return 0
        sleep 0.2
    done
    echo "server at $1 did not come up" >&2
    return 1
}

weft_run() {
    local db="$1" port=2125
    target/release/weft --db "$db" serve --agents bench/serve-agent --keys "$work/keys" \
        --listen "127.0.0.1:$port" --max-runs-per-user 100000 2>"$work/weft.log" &
    local pid=$!
    pids+=("$pid")
    wait_up "http://127.0.0.1:$port/health"
    "$py" bench/serve_stream.py --url "http://127.0.0.1:$port" --assistant agent \
        --final "done after 3 echo calls" --n "$n" --api-key "$key" --server-pid "$pid"
    kill -TERM "$pid"
    wait "$pid" 2>/dev/null || true
}

if [[ "$only" != langgraph ]]; then
    echo "weft serve, SQLite file:"
    weft_run "$work/serve.db"
    echo "weft serve, --db memory:"
    weft_run "memory:"
fi

if [[ "$only" != weft ]]; then
    venv="${LANGGRAPH_VENV:-$HOME/.cache/weft/lg-venv}"
    if [[ ! -x "$venv/bin/langgraph" ]]; then
        python3 -m venv "$venv"
        "$venv/bin/pip" install --quiet "langgraph-cli[inmem]" langgraph-sdk
    fi
    peer=../shared/bench/langgraph-server
    pgid="$(VENV="$venv" PORT=2124 "$peer/start_server.sh" "$work/langgraph.log" --n-jobs-per-worker 100)"
    pids+=("-$pgid")
    pid="$(ss -ltnpH 'sport = :2124' | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2)"
    "$venv/bin/langgraph" --version 2>/dev/null | head -1 || true
    echo "langgraph dev (in-memory), --n-jobs-per-worker 100:"
    "$py" bench/serve_stream.py --url http://127.0.0.1:2124 --assistant agent \
        --final "done after 3 echo calls" --n "$n" --server-pid "$pid"
fi
