#!/usr/bin/env bash
# AgentDojo against weft: utility without attack, utility under attack and attack success rate per
# suite, with a compromised model (it obeys every injection it sees), so the figures measure
# what the runtime lets through. See BENCHMARKS.md, "Prompt injection: AgentDojo".
#
#   bench/agentdojo.sh                                     # every suite, every (user task, injection task) pair
#   bench/agentdojo.sh --suites banking --user-tasks 2 --injection-tasks 1   # a sample
#
# Installs agentdojo (pinned) in ~/.cache/weft/dojo-venv (WEFT_DOJO_VENV) and builds weft (debug,
# CARGO_TARGET_DIR honoured) unless WEFT_BIN names a binary. Other arguments go to the driver
# (bench/agentdojo/driver.py --help).
set -euo pipefail
cd "$(dirname "$0")/.."
eval "$(bench/agentdojo/setup)"
if [ -z "${WEFT_BIN:-}" ]; then
    cargo build --quiet -p weft --bin weft
    WEFT_BIN="${CARGO_TARGET_DIR:-target}/debug/weft"
fi
exec "$WEFT_TEST_DOJO_PYTHON" bench/agentdojo/driver.py --weft "$WEFT_BIN" "$@"
