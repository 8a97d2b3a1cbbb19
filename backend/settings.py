"""The backend's switches, read from config.pbtxt `parameters` (keys compatible with the official backend)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..common.errors import ConfigError
from ..common.parameters import config_parameters, parse_bool, parse_choice, parse_positive

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
    # PER_TOKEN_HISTOGRAMS: how the histograms observed once per token (metrics.names.PER_TOKEN_HISTOGRAMS) reach
    # Triton: "series" as their _bucket/_sum/_count counter series (a cost independent of traffic), "histogram" as
    # Triton histogram families like every other (one IPC round trip per token; docs/benchmarks.md).
    per_token_histograms: str = "series"
    # OTLP_METRICS: the registry also sent over OTLP/HTTP with exemplars (metrics.otlp_metrics); needs
    # REPORT_CUSTOM_METRICS.
    otlp_metrics: bool = False
    # RESPONSE_THREADS: threads sending responses to Triton, each request on one (backend.response_thread): one
    # round trip at a time per thread, so more let the first tokens of simultaneous streams go out side by side.
    response_threads: int = 1

    # GPU_DEVICE_IDS is the official backend's (read by backend.device); the health keys live in health.settings.
    KEYS = frozenset({"REPORT_CUSTOM_METRICS", "UNLOAD_DRAIN_TIMEOUT_S", "ENGINE_START_TIMEOUT_S", "GPU_DEVICE_IDS",
                      "PER_TOKEN_HISTOGRAMS", "OTLP_METRICS", "RESPONSE_THREADS"})
    MAX_RESPONSE_THREADS = 32
    PER_TOKEN_HISTOGRAM_CHOICES = ("series", "histogram")

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
            per_token_histograms=parse_choice("PER_TOKEN_HISTOGRAMS", params.get("PER_TOKEN_HISTOGRAMS", "series"),
                                              cls.PER_TOKEN_HISTOGRAM_CHOICES),
            otlp_metrics=parse_bool("OTLP_METRICS", params.get("OTLP_METRICS", "false")),
            response_threads=cls._response_threads(params.get("RESPONSE_THREADS")),
        )

    @classmethod
    def _response_threads(cls, value: str | None) -> int:
        if value is None:
            return cls.response_threads
        threads = parse_positive("RESPONSE_THREADS", value, kind=int)
        if threads > cls.MAX_RESPONSE_THREADS:
            raise ConfigError(f"config.pbtxt parameter RESPONSE_THREADS must be at most "
                              f"{cls.MAX_RESPONSE_THREADS} (got {threads}): each is a thread of the stub")
        return threads
