"""Instance kind checks, as in the official backend (single-GPU KIND_GPU instances; KIND_MODEL for multi-GPU)."""

from __future__ import annotations

import os
from typing import Any

from backend.errors import ConfigError


def check_device(config: dict[str, Any], args: dict[str, str], log: Any) -> None:
    """KIND_GPU means one GPU per instance (as in the official backend); multi-GPU models use KIND_MODEL."""
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
