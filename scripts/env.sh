# Shared environment for every script and make target: source it, don't run it.
# Why each variable is set is explained in README.md ("How it runs on CPU").
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
BUILD="$ROOT/.build"
BACKEND_DIR="$BUILD/backends"
TINY_MODEL="$ROOT/samples/model_repository/vllm_model/1/tiny-llama"
export ROOT VENV BUILD BACKEND_DIR TINY_MODEL

# The Python backend stub embeds Python: it finds python3 on PATH and loads libpython from LD_LIBRARY_PATH.
export PATH="$VENV/bin:$PATH"
if [ -x "$VENV/bin/python" ]; then
  _libdir="$("$VENV/bin/python" -c 'import sysconfig;print(sysconfig.get_config_var("LIBDIR"))')"
  _site="$("$VENV/bin/python" -c 'import sysconfig;print(sysconfig.get_paths()["purelib"])')"
  export LD_LIBRARY_PATH="$_libdir:$_site/nvidia_pytriton.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  TRITONSERVER="$_site/pytriton/tritonserver/bin/tritonserver"
  export TRITONSERVER
fi

# vLLM on CPU: KV cache size, loopback only, no telemetry, no hub. VLLM_CPU_NUM_OF_RESERVED_CPU is left to
# vLLM's default (one core kept free of the worker's OpenMP threads): measured faster for the Triton path.
export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"
export VLLM_HOST_IP="${VLLM_HOST_IP:-127.0.0.1}"
export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
export TOKENIZERS_PARALLELISM=false

say() { printf '\033[1m[%s]\033[0m %s\n' "${STEP:-setup}" "$*"; }
