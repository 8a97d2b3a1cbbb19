"""The tiny model's engine arguments for `make serve`, the tests and `make bench`: one place, per device.

On CPU (this project's machines): float32, which is faster than bf16 on their CPUs, and eager mode, which starts
in half the time; vLLM's CPU KV cache comes from VLLM_CPU_KVCACHE_SPACE (scripts/env.sh).

On an NVIDIA GPU: bfloat16, and a bound on each engine's share of the GPU's memory (vLLM's default takes 90 % and
refuses to start a second engine beside it), small enough that the suite's engines — up to about ten at once, two
test workers each with a server of several models — fit side by side on one GPU. The tests stay eager (an engine
start there is mostly CUDA-graph capture otherwise, and the suite starts about thirty); `make serve` and `make
bench` capture CUDA graphs, which is what operators run and what makes a decode step fast (docs/benchmarks.md).

Which device: `nvidia-smi -L` lists a GPU (as scripts/setup.sh decides between requirements/cpu.txt and gpu.txt);
VLLM_TRITON_DEVICE=cpu or gpu overrides it.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, Literal

ROOT = Path(__file__).resolve().parent.parent
TINY_MODEL = ROOT / "samples" / "model_repository" / "vllm_model" / "1" / "tiny-llama"
Purpose = Literal["test", "serve", "bench"]
# Each engine's share of the GPU's memory (vLLM's gpu_memory_utilization) by purpose: a test engine of the tiny
# model needs well under a GiB; a benchmark engine gets room for a ≈ 1B model and its KV cache, six side by side.
GPU_MEMORY_SHARE: dict[str, float] = {"test": 0.04, "serve": 0.1, "bench": 0.1}
# A fixed KV cache per engine: vLLM then sizes no cache from a memory profile, which fails ("Error in memory
# profiling") when another engine on the same GPU frees memory meanwhile, as engines starting side by side do.
# 4 GiB holds 128 K tokens of the ≈ 1B model (32 KiB each), 64 streams × 1024 tokens twice over.
GPU_KV_CACHE_BYTES = 4 * 2**30


@functools.cache
def gpu_present() -> bool:
    forced = os.environ.get("VLLM_TRITON_DEVICE", "").lower()
    if forced in ("cpu", "gpu"):
        return forced == "gpu"
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return listed.returncode == 0 and "GPU" in listed.stdout


def device_settings(purpose: Purpose) -> dict[str, Any]:
    """The engine arguments that depend on the device, for the project's own models (the samples' model.json files
    hold the CPU ones)."""
    if not gpu_present():
        return {"dtype": "float32", "enforce_eager": True}
    return {"dtype": "bfloat16", "gpu_memory_utilization": GPU_MEMORY_SHARE[purpose],
            "kv_cache_memory_bytes": GPU_KV_CACHE_BYTES, "enforce_eager": purpose == "test"}


def engine_for(purpose: Purpose, model: Path | str = TINY_MODEL, max_model_len: int = 1024) -> dict[str, Any]:
    """model.json (AsyncEngineArgs) for `model` on this machine's device."""
    return {"model": str(model), "max_model_len": max_model_len, **device_settings(purpose)}
