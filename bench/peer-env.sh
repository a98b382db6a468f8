# Sourced by bench/compare.sh and bench/python.sh (after ROOT is set): finds the LangGraph peer
# script (exported as LANGGRAPH_BENCH) and makes bench/.venv with LangGraph once; sets VENV and
# PY. The caller's name is the first argument (for messages).
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
