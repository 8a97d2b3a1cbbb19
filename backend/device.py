"""Instance kind checks, as in the official backend (single-GPU KIND_GPU instances; KIND_MODEL for multi-GPU)."""

from __future__ import annotations

import os
from typing import Any

from ..common.errors import ConfigError


def check_device(config: dict[str, Any], args: dict[str, str], log: Any, gpu_device_ids: str | None = None) -> None:
    """KIND_GPU means one GPU per instance (as in the official backend); multi-GPU models use KIND_MODEL, and
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
        log.info(f"KIND_GPU instance: using GPU {device_id} (CUDA_VISIBLE_DEVICES)")
        os.environ["CUDA_VISIBLE_DEVICES"] = str(device_id)
    if kind == "MODEL" and gpu_device_ids:
        ids = _gpu_ids(gpu_device_ids)
        if parallel > 1 and len(ids) != parallel:
            raise ConfigError(f"GPU_DEVICE_IDS lists {len(ids)} GPU(s) but tensor_parallel_size × "
                              f"pipeline_parallel_size = {parallel}; list one GPU per rank")
        log.info(f"KIND_MODEL instance: using GPUs {','.join(map(str, ids))} (GPU_DEVICE_IDS)")
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, ids))


def _gpu_ids(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.split(",")]
    except ValueError:
        raise ConfigError(f"config.pbtxt parameter GPU_DEVICE_IDS: {text!r}; expected comma-separated GPU "
                          "indices such as \"0,1\"") from None
    if any(i < 0 for i in ids) or len(set(ids)) != len(ids):
        raise ConfigError(f"config.pbtxt parameter GPU_DEVICE_IDS: {text!r}; GPU indices must be non-negative "
                          "and distinct")
    return ids
