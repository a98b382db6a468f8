#!/usr/bin/env bash
# BFCL (the Berkeley Function Calling Leaderboard's `simple`, `multiple` and `parallel`
# categories, scored by its own AST checker) on a small model, two ways on the same GGUF file:
# weft's in-process model with the tools' grammar (`local`), and llama.cpp's server
# (llama-cpp-python's) sent the same prompt with no grammar (`server`). Both get the request a
# ReAct agent makes for its first model call, at temperature 0, on one thread each (they run at
# the same time, one core each). See BENCHMARKS.md ("Tool calls: BFCL").
#
#   bench/bfcl.sh [--limit N] [--models "smollm2 gemma3"] [--backends local,server] [--out DIR]
#
# --limit: the first N questions of each category (default 50; 0 for all 800). Needs a release
# weft-bench with the in-process model (built here if missing:
# `cargo build --release -p weft-bench --features local-model`), and installs what it uses:
# bench/bfcl/setup (bfcl-eval), scripts/setup-local-model --gemma (the two GGUF files) and
# llama-cpp-python (scripts/llm-server's environment).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

limit=50
models="smollm2 gemma3"
backends="local,server"
out="$root/target/bfcl/$(date -u +%Y%m%dT%H%M%S)"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --limit) limit=${2:?--limit needs a number}; shift ;;
        --models) models=${2:?--models needs names}; shift ;;
        --backends) backends=${2:?--backends needs names}; shift ;;
        --out) out=${2:?--out needs a directory}; shift ;;
        *) echo "bfcl.sh: unknown option '$1' (--limit N, --models \"smollm2 gemma3\", --backends local,local_required,server, --out DIR)" >&2; exit 2 ;;
    esac
    shift
done
mkdir -p "$out"
log() { printf 'bfcl.sh: %s\n' "$*" >&2; }

eval "$(bench/bfcl/setup)"
eval "$(scripts/setup-local-model --gemma)"
venv="${WEFT_LLM_VENV:-$HOME/.cache/weft/llm-venv}"
if ! "$venv/bin/python" -c 'import llama_cpp.server' 2>/dev/null; then
    log "installing llama-cpp-python (through scripts/llm-server's install)"
    scripts/llm-server start >/dev/null
    scripts/llm-server stop
fi
bin="${CARGO_TARGET_DIR:-$root/target}/release/weft-bench"
if [[ ! -x "$bin" ]] || ! "$bin" bfcl --help >/dev/null 2>&1; then
    log "building weft-bench (release, with the in-process model)"
    cargo build --release --locked -p weft-bench --features local-model >&2
fi

"$WEFT_BFCL_PYTHON" bench/bfcl/prepare.py --limit "$limit" "$out/questions.jsonl"

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
server_pid=""
stop_server() {
    if [[ -n "$server_pid" ]]; then
        kill "$server_pid" 2>/dev/null || true
        wait "$server_pid" 2>/dev/null || true
    fi
    server_pid=""
}
trap stop_server EXIT

{
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
    echo "limit per category: $limit; backends: $backends"
    echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "llama-cpp-python: $("$venv/bin/python" -c 'import llama_cpp; print(llama_cpp.__version__)')"
    echo "bfcl-eval: $("$WEFT_BFCL_PYTHON" -c 'import importlib.metadata as m; print(m.version("bfcl-eval"))')"
} > "$out/run.txt"

for model in $models; do
    case "$model" in
        smollm2) gguf="$WEFT_TEST_LOCAL_GGUF" ;;
        gemma3) gguf="$WEFT_TEST_LOCAL_GEMMA_GGUF" ;;
        *) log "unknown model '$model' (smollm2, gemma3)"; exit 2 ;;
    esac
    pids=()
    local_backends="$(tr ',' '\n' <<<"$backends" | grep -v '^server$' | paste -sd, || true)"
    if [[ -n "$local_backends" ]]; then
        log "$model: in the process ($local_backends)"
        CANDLE_NUM_THREADS=1 "$bin" bfcl --questions "$out/questions.jsonl" --gguf "$gguf" \
            --backends "$local_backends" --out "$out/$model-local.jsonl" \
            >"$out/$model-local.txt" 2>"$out/$model-local.log" &
        pids+=($!)
    fi
    if grep -qx server <<<"$(tr ',' '\n' <<<"$backends")"; then
        port="$(free_port)"
        "$venv/bin/python" -m llama_cpp.server --model "$gguf" --host 127.0.0.1 --port "$port" \
            --n_ctx 4096 --n_threads 1 --n_threads_batch 1 >"$out/$model-server-llama.log" 2>&1 &
        server_pid=$!
        for _ in $(seq 1 120); do
            curl -fsS "http://127.0.0.1:$port/v1/models" >/dev/null 2>&1 && break
            sleep 1
        done
        log "$model: llama.cpp's server on port $port"
        "$bin" bfcl --questions "$out/questions.jsonl" --gguf "$gguf" --backends server \
            --server-url "http://127.0.0.1:$port/v1" --out "$out/$model-server.jsonl" \
            >"$out/$model-server.txt" 2>"$out/$model-server.log" &
        pids+=($!)
    fi
    for p in "${pids[@]}"; do wait "$p"; done
    stop_server
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$out/run.txt"

cat "$out/run.txt"
"$WEFT_BFCL_PYTHON" bench/bfcl/score.py $(ls "$out"/*-local.jsonl "$out"/*-server.jsonl 2>/dev/null) --json "$out/figures.json" 2>&1 | grep -v '^$' | tee "$out/table.md"
log "results in $out"
