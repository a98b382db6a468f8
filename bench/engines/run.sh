#!/usr/bin/env bash
# Measures the two candidate engines for weft's `local` model on the same GGUF files and prints
# markdown tables: clean build time and binary size, load time, prompt and generation speed
# and peak memory on 1 and 2 threads, and what each does with a malformed file.
#
#   eval "$(scripts/setup-local-model --gemma)"   # WEFT_TEST_LOCAL_GGUF, WEFT_TEST_LOCAL_GEMMA_GGUF
#   bench/engines/run.sh [--rebuild] [--repeat N] [--prompt-tokens N]
#
# llama.cpp's build needs cmake, a C++ compiler and libclang (Debian: cmake libclang-dev clang).
# A clean build of each engine (build.sh) runs when its record (target/build-ENGINE.txt) is
# missing or with --rebuild; otherwise the recorded clean build is reported and the binary is
# only brought up to date. The load average (`/proc/loadavg`, 1, 5 and 15 minutes) is taken
# before every build and every run: the machine may be shared. Raw outputs: target/runs/.
set -euo pipefail
cd "$(dirname "$0")"

rebuild=0
repeat=1
prompt_tokens=256
while [[ $# -gt 0 ]]; do
    case "$1" in
        --rebuild) rebuild=1 ;;
        --repeat) repeat=${2:?--repeat needs a number}; shift ;;
        --prompt-tokens) prompt_tokens=${2:?--prompt-tokens needs a number}; shift ;;
        *) echo "run.sh: unknown option '$1' (--rebuild, --repeat N, --prompt-tokens N)" >&2; exit 2 ;;
    esac
    shift
done

smollm=${WEFT_TEST_LOCAL_GGUF:-}
gemma=${WEFT_TEST_LOCAL_GEMMA_GGUF:-}
for f in "$smollm" "$gemma"; do
    if [[ -z "$f" || ! -f "$f" ]]; then
        echo "run.sh: the model files are not set or not there (WEFT_TEST_LOCAL_GGUF, WEFT_TEST_LOCAL_GEMMA_GGUF); run: eval \"\$(scripts/setup-local-model --gemma)\" from the repository's root" >&2
        exit 2
    fi
done

engines=(llama candle)
load() { cut -d' ' -f1-3 /proc/loadavg; }
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }

# Builds.
for e in "${engines[@]}"; do
    if [[ "$rebuild" == 1 || ! -f target/build-$e.txt ]]; then
        echo "run.sh: clean build of $e ..." >&2
        ./build.sh "$e" >target/build-$e.log 2>&1 || { echo "run.sh: the $e build failed: target/build-$e.log" >&2; exit 1; }
    fi
    cargo build --release --locked --features "$e" --bin "engine-$e" --target-dir "target/$e" >&2
done

mkdir -p target/runs target/bad
out=target/runs/$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$out"

echo "## Build"
echo
echo "| engine | clean release build | load before (1, 5, 15 min) | started (UTC) | binary | stripped | shared libraries |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for e in "${engines[@]}"; do
    rec() { sed -n "s/^$1=//p" "target/build-$e.txt"; }
    bin=target/$e/release/engine-$e
    strip -o "target/$e/engine-$e.stripped" "$bin"
    libs=$(ldd "$bin" | awk '{print $1}' | grep -v -E '^(linux-vdso|/lib64/ld-linux)' | sed 's/\.so.*//' | paste -sd ' ' -)
    echo "| $e | $(rec seconds) s | $(rec load_before) | $(rec start_utc) | $(mib "$(stat -c %s "$bin")") | $(mib "$(stat -c %s "target/$e/engine-$e.stripped")") | $libs |"
done
echo

# Malformed copies of the SmolLM2 file (corrupt.py says how each is made).
python3 corrupt.py "$smollm" target/bad

echo "## Malformed files (SmolLM2-135M Q4_1)"
echo
echo "| file | engine | outcome | what it said (llama.cpp: the first reason in its log; candle: the error it returned) |"
echo "| --- | --- | --- | --- |"
for bad in half tensor-count key-length head-count-kv; do
    for e in "${engines[@]}"; do
        log=$out/bad-$bad-$e.err
        set +e
        timeout 300 "target/$e/release/engine-$e" "target/bad/$bad.gguf" 1 >"$out/bad-$bad-$e.out" 2>"$log"
        rc=$?
        set -e
        if [[ $rc == 0 ]]; then
            outcome="ran (exit 0)"
        elif [[ $rc == 124 ]]; then
            outcome="still running after 300 s (killed)"
        elif [[ $rc -gt 128 ]]; then
            outcome="**killed by SIG$(kill -l $((rc - 128)))** (status $rc)"
        else
            outcome="error, exit $rc"
        fi
        msg=$(grep -m1 -E 'gguf_init_from_reader: |error loading model|^engine-' "$log" | cut -c1-200 | sed 's/|/\\|/g')
        echo "| $bad | $e | $outcome | \`$msg\` |"
    done
done
echo

echo "## Speed and memory ($prompt_tokens prompt tokens, then 128 generated greedily)"
echo
echo "| model | engine | threads | load before (1, 5, 15 min) | load time | prompt tokens/s | prompt CPU s | generation tokens/s | generation CPU s | peak RSS |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for r in $(seq 1 "$repeat"); do
    for m in smollm gemma; do
        file=${!m}
        name=$([[ $m == smollm ]] && echo "SmolLM2-135M Q4_1" || echo "Gemma 3 270M Q4_K_M")
        for t in 1 2; do
            for e in "${engines[@]}"; do
                before=$(load)
                res=$out/run$r-$m-$e-$t
                set +e
                timeout 900 "target/$e/release/engine-$e" "$file" "$t" "$prompt_tokens" >"$res.out" 2>"$res.err"
                rc=$?
                set -e
                line=$(grep '^RESULT ' "$res.out" || true)
                if [[ $rc != 0 || -z "$line" ]]; then
                    echo "| $name | $e | $t | $before | failed (status $rc: $(grep -v '^[[:space:]]*$' "$res.err" | tail -1 | cut -c1-100)) | | | | | |"
                    continue
                fi
                get() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$line"; }
                echo "| $name | $e | $t | $before | $(get load_s) s | $(get prompt_tps) ($(get prompt_tokens) tokens) | $(get prompt_cpu_s) | $(get gen_tps) | $(get gen_cpu_s) | $(get peak_rss_mib) MiB |"
            done
        done
    done
done
echo
echo "Raw outputs (each run's generated text is its TEXT line): $out"
