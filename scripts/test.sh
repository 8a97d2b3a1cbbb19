#!/usr/bin/env bash
# The whole test suite: unit tests, then integration tests against real tritonserver + vLLM.
set -euo pipefail
source "$(dirname "$0")/env.sh"
STEP=test
cd "$ROOT"
say "running the test suite (integration tests start real tritonserver + vLLM processes)"
# Two workers: one owns the explicit-mode server, the other the default one (tests/conftest.py).
exec "$PY" -m pytest -n 2 --dist loadgroup --no-loadscope-reorder --durations=12 "$@"
