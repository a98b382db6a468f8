#!/usr/bin/env bash
# Clean release build of one engine's binary, in its own target directory, timed.
#   bench/engines/build.sh llama|candle
# Writes target/build-ENGINE.txt: the UTC start, the load average before, the wall time (s),
# the binary's size (bytes). The `--timings` report lands in target/ENGINE/cargo-timings/.
set -euo pipefail
cd "$(dirname "$0")"
engine=${1:?usage: build.sh llama|candle}
case "$engine" in llama|candle) ;; *) echo "build.sh: unknown engine '$engine' (llama or candle)" >&2; exit 2 ;; esac
dir=target/$engine
rm -rf "$dir"
mkdir -p target
start_utc=$(date -u +%Y-%m-%dT%H:%M:%SZ)
load=$(cut -d' ' -f1-3 /proc/loadavg)
t0=$(date +%s.%N)
cargo build --release --locked --features "$engine" --bin "engine-$engine" --target-dir "$dir" --timings
t1=$(date +%s.%N)
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
bin=$dir/release/engine-$engine
size=$(stat -c %s "$bin")
secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.0f", b - a }')
{
  echo "start_utc=$start_utc"
  echo "load_before=$load"
  echo "load_after=$load_after"
  echo "seconds=$secs"
  echo "binary_bytes=$size"
} > "target/build-$engine.txt"
cat "target/build-$engine.txt"
