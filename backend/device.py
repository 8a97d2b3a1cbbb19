"""Instance kind checks, as in the official backend (single-GPU KIND_GPU instances; KIND_MODEL for multi-GPU)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..common.errors import ConfigError


def device_environment(config: Mapping[str, Any], args: Mapping[str, str],
                       gpu_device_ids: tuple[int, ...] | None = None) -> tuple[dict[str, str], str | None]:
    """The GPUs the instance's engine sees (`CUDA_VISIBLE_DEVICES`, or nothing to set) and the line saying so.

    KIND_GPU means one GPU per instance (as in the official backend); multi-GPU models use KIND_MODEL, and
    GPU_DEVICE_IDS pins a KIND_MODEL instance to the listed GPUs, one per tensor × pipeline rank."""
    kind = args.get("model_instance_kind", "")
    parallel = int(config.get("tensor_parallel_size", 1)) * int(config.get("pipeline_parallel_size", 1))
    if kind == "GPU" and parallel > 1:
        raise ConfigError(
            "KIND_GPU is for single-GPU models but tensor_parallel_size × pipeline_parallel_size = "
            f"{parallel}; use KIND_MODEL in config.pbtxt for multi-GPU models"
        )
    device_id = int(args.get("model_instance_device_id", "-1") or -1)
    if kind == "GPU" and device_id >= 0:
        return ({"CUDA_VISIBLE_DEVICES": str(device_id)},
                f"KIND_GPU instance: using GPU {device_id} (CUDA_VISIBLE_DEVICES)")
    if kind == "MODEL" and gpu_device_ids:
        if parallel > 1 and len(gpu_device_ids) != parallel:
            raise ConfigError(f"GPU_DEVICE_IDS lists {len(gpu_device_ids)} GPU(s) but tensor_parallel_size × "
                              f"pipeline_parallel_size = {parallel}; list one GPU per rank")
        ids = ",".join(map(str, gpu_device_ids))
        return {"CUDA_VISIBLE_DEVICES": ids}, f"KIND_MODEL instance: using GPUs {ids} (GPU_DEVICE_IDS)"
    return {}, None
