#!/usr/bin/env bash
# What exporting costs: `react 400` and `concurrent 1000 3` of weft-bench with the OTLP exporter
# off, on (a collector on loopback: scripts/setup-otel), and on with a collector that is down
# (nothing listens on the endpoint). The three are run interleaved, off, on, down, off, ..., R
# times each (default 5), so that a machine loaded by other work weighs on all three alike; the
# medians are printed, with the load average before and after.
#
#   bench/telemetry.sh [--runs R] [--bin target/release/weft-bench]
set -euo pipefail

ROOT=$(git rev-parse --show-toplevel)
RUNS=5
BIN="$ROOT/target/release/weft-bench"
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --bin) BIN="$2"; shift 2 ;;
    -h|--help) sed -n 2,8p "$0"; exit 0 ;;
    *) echo "telemetry.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -x "$BIN" ] || { echo "telemetry.sh: no $BIN; build it: cargo build --release --workspace" >&2; exit 2; }
eval "$("$ROOT/scripts/setup-otel")"
# A port nothing listens on: the collector that is down.
DOWN="http://127.0.0.1:9"
out=$(mktemp)
trap 'rm -f "$out" "$out.err"' EXIT
echo "load before: $(cat /proc/loadavg)"
for i in $(seq "$RUNS"); do
  for cfg in off on down; do
    for w in "react 400" "concurrent 1000 3"; do
      case $cfg in
        off) env -u OTEL_EXPORTER_OTLP_ENDPOINT "$BIN" $w ;;
        on) OTEL_EXPORTER_OTLP_ENDPOINT="$WEFT_TEST_OTLP_ENDPOINT" OTEL_SERVICE_NAME=weft-bench "$BIN" $w ;;
        down) OTEL_EXPORTER_OTLP_ENDPOINT="$DOWN" OTEL_SERVICE_NAME=weft-bench "$BIN" $w ;;
      esac 2>"$out.err" | sed "s/^/$cfg /" | tee -a "$out"
      grep '^telemetry:' "$out.err" | sed "s/^/$cfg $i /" || true
    done
  done
done
echo "load after: $(cat /proc/loadavg)"
echo
echo "medians over $RUNS runs (react 400: total_ms; concurrent 1000 3: wall_s)"
python3 - "$out" <<'EOF'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    cfg, rest = line.split(" ", 1)
    m = re.search(r"(total_ms|wall_s)=([0-9.]+)", rest)
    if not m:
        continue
    work = "react 400" if rest.startswith("weft react") else "concurrent 1000 3"
    rows.setdefault((work, m.group(1)), {}).setdefault(cfg, []).append(float(m.group(2)))
for (work, fig), by in rows.items():
    off = statistics.median(by["off"])
    cells = []
    for cfg in ("off", "on", "down"):
        med = statistics.median(by[cfg])
        cells.append(f"{cfg} {med:.3f} ({(med / off - 1) * 100:+.1f} %)")
    print(f"{work} {fig}: " + " · ".join(cells) + f"  [n={len(by['off'])}]")
EOF
