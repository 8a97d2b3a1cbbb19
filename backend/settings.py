"""The backend's switches, read from config.pbtxt `parameters` (keys compatible with the official backend)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..common.parameters import config_parameters, parse_bool, parse_positive

# Keys Triton's Python backend itself reads from the same `parameters` block.
PYTHON_BACKEND_KEYS = frozenset({"EXECUTION_ENV_PATH", "FORCE_CPU_ONLY_INPUT_TENSORS"})


@dataclass(frozen=True)
class BackendSettings:
    """Everything config.pbtxt can switch. Health-monitor settings live in `health.settings`."""

    report_custom_metrics: bool = False
    unload_drain_timeout_s: float = 30.0  # UNLOAD_DRAIN_TIMEOUT_S: in-flight requests may finish this long
    # ENGINE_START_TIMEOUT_S: the bound on an engine's start, its warm-up included (at load and at every restart):
    # an engine that has not served its warm-up request by then fails the load (or the restart) with that cause.
    engine_start_timeout_s: float = 600.0

    # GPU_DEVICE_IDS is the official backend's (read by backend.device); the health keys live in health.settings.
    KEYS = frozenset({"REPORT_CUSTOM_METRICS", "UNLOAD_DRAIN_TIMEOUT_S", "ENGINE_START_TIMEOUT_S", "GPU_DEVICE_IDS"})

    @classmethod
    def from_model_config(cls, model_config: dict[str, Any]) -> BackendSettings:
        params = config_parameters(model_config)
        drain = params.get("UNLOAD_DRAIN_TIMEOUT_S")
        start = params.get("ENGINE_START_TIMEOUT_S")
        return cls(
            report_custom_metrics=parse_bool(
                "REPORT_CUSTOM_METRICS", params.get("REPORT_CUSTOM_METRICS", "false")
            ),
            unload_drain_timeout_s=30.0 if drain is None else parse_positive("UNLOAD_DRAIN_TIMEOUT_S", drain,
                                                                                 allow_zero=True),
            engine_start_timeout_s=600.0 if start is None else parse_positive("ENGINE_START_TIMEOUT_S", start),
        )
