# Sourced by bench/compare.sh and bench/python.sh (after ROOT is set): finds the LangGraph peer
# script (exported as LANGGRAPH_BENCH) and makes bench/.venv with LangGraph once; sets VENV and
# PY, and defines fsync_cost. The caller's name is the first argument (for messages).
who="$1"
PEER="$ROOT/../shared/bench/langgraph_bench.py"
if [ ! -f "$PEER" ]; then
  PEER="${LANGGRAPH_BENCH:-}"
fi
if [ -z "$PEER" ] || [ ! -f "$PEER" ]; then
  echo "$who: the LangGraph script is not at $ROOT/../shared/bench/langgraph_bench.py; set LANGGRAPH_BENCH to its path" >&2
  exit 2
fi
export LANGGRAPH_BENCH="$PEER"

VENV="$ROOT/bench/.venv"
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import langgraph.prebuilt, langgraph.checkpoint.sqlite, aiosqlite' 2>/dev/null; then
  echo "== creating $VENV with LangGraph" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --upgrade pip
  "$VENV/bin/pip" install --quiet langgraph langgraph-checkpoint-sqlite aiosqlite
fi
PY="$VENV/bin/python"

# What one sync costs on this disk now (at full, both sides wait for one per commit).
fsync_cost() {
  "$PY" - "$ROOT/target" <<'PYEOF'
import os, sys, tempfile, time
with tempfile.NamedTemporaryFile(dir=sys.argv[1]) as f:
    ts = []
    for _ in range(200):
        f.write(b"x" * 4096); f.flush()
        t = time.perf_counter(); os.fdatasync(f.fileno()); ts.append(time.perf_counter() - t)
ts.sort()
print(f"fdatasync of 4 KiB: median {ts[100]*1e6:.0f} us, p90 {ts[180]*1e6:.0f} us")
PYEOF
}
