#!/usr/bin/env bash
# What exporting costs: `react 400` and `concurrent 1000 3` of weft-bench with the OTLP exporter
# off, on (a collector on loopback: scripts/setup-otel), and on with a collector that is down
# (nothing listens on the endpoint). The three are run interleaved, off, on, down, off, ..., R
# times each (default 5), so that a machine loaded by other work weighs on all three alike; the
# medians are printed, with the load average before and after.
# Then `weft batch` of N short sessions (default 200; bench/telemetry/short.yaml, a scripted
# model, one tool call) with the exporter off and on, interleaved R times, each in a fresh store:
# the median wall time and CPU time (user + system of the process) of each.
#
#   bench/telemetry.sh [--runs R] [--sessions N] [--batch-only]
#                      [--bin target/release/weft-bench] [--weft target/release/weft]
set -euo pipefail

ROOT=$(git rev-parse --show-toplevel)
RUNS=5
SESSIONS=200
BATCH_ONLY=
BIN="$ROOT/target/release/weft-bench"
WEFT="$ROOT/target/release/weft"
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) RUNS="$2"; shift 2 ;;
    --sessions) SESSIONS="$2"; shift 2 ;;
    --batch-only) BATCH_ONLY=1; shift ;;
    --bin) BIN="$2"; shift 2 ;;
    --weft) WEFT="$2"; shift 2 ;;
    -h|--help) sed -n 2,13p "$0"; exit 0 ;;
    *) echo "telemetry.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ -n "$BATCH_ONLY" ] || [ -x "$BIN" ] || { echo "telemetry.sh: no $BIN; build it: cargo build --release --workspace" >&2; exit 2; }
[ -x "$WEFT" ] || { echo "telemetry.sh: no $WEFT; build it: cargo build --release -p weft" >&2; exit 2; }
eval "$("$ROOT/scripts/setup-otel")"

batch() {
  echo "load before the batch: $(cat /proc/loadavg)"
  python3 - "$WEFT" "$ROOT/bench/telemetry" "$RUNS" "$SESSIONS" "$WEFT_TEST_OTLP_ENDPOINT" <<'PY'
import json, os, resource, shutil, statistics, subprocess, sys, tempfile, time
weft, src, runs, n, endpoint = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
rows = {"off": [], "on": []}
for r in range(runs):
    for cfg in ("off", "on"):
        with tempfile.TemporaryDirectory() as d:
            for f in ("short.yaml", "short.script.yaml"):
                shutil.copy(os.path.join(src, f), d)
            with open(os.path.join(d, "records.jsonl"), "w") as f:
                for i in range(n):
                    f.write(json.dumps({"task": f"Say hello {i}."}) + "\n")
            env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
            if cfg == "on":
                env["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
                env["OTEL_SERVICE_NAME"] = "weft-bench-batch"
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = time.monotonic()
            p = subprocess.run([weft, "--db", "b.db", "batch", "short.yaml", "records.jsonl",
                                "--concurrency", "4", "--out", "out.jsonl"],
                               cwd=d, env=env, capture_output=True, text=True)
            wall = time.monotonic() - t0
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            if p.returncode != 0:
                sys.exit(f"weft batch failed ({cfg}): {p.stderr}")
            for l in p.stderr.splitlines():
                if l.startswith("telemetry:"):
                    print(f"{cfg} {r + 1} {l}")
            print(f"{cfg} {r + 1} batch {n}: wall_s={wall:.3f} cpu_s={cpu:.3f}")
            rows[cfg].append((wall, cpu))
off_w = statistics.median(w for w, _ in rows["off"]); on_w = statistics.median(w for w, _ in rows["on"])
off_c = statistics.median(c for _, c in rows["off"]); on_c = statistics.median(c for _, c in rows["on"])
print(f"batch {n}, median of {runs}: wall off {off_w:.3f} s, on {on_w:.3f} s ({(on_w / off_w - 1) * 100:+.1f} %); "
      f"cpu off {off_c:.3f} s, on {on_c:.3f} s ({(on_c / off_c - 1) * 100:+.1f} %, "
      f"{(on_c - off_c) / n * 1000:.2f} ms per session)")
PY
  echo "load after the batch: $(cat /proc/loadavg)"
}
if [ -n "$BATCH_ONLY" ]; then
  batch
  exit 0
fi
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

echo
batch
