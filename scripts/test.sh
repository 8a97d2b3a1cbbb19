#!/usr/bin/env bash
# The whole test suite: unit tests, then integration tests against real tritonserver + vLLM.
set -euo pipefail
source "$(dirname "$0")/env.sh"
STEP=test
cd "$ROOT"
say "running the test suite (integration tests start real tritonserver + vLLM processes)"
exec python -m pytest "$@"
