"""A minimal vLLM stat logger whose only job is to note when the engine last made a step.

vLLM calls every stat logger once per engine step that produced output, metrics on or off, so the time of the
last call is the engine's progress signal for the stall watchdog.
"""

from __future__ import annotations

import time
from typing import Any


class Heartbeat:
    def __init__(self) -> None:
        self.last_step: float | None = None

    def logger_class(self) -> type:
        """A StatLoggerBase subclass vLLM instantiates per engine, bound to this heartbeat."""
        from vllm.v1.metrics.loggers import StatLoggerBase

        heartbeat = self

        class HeartbeatStatLogger(StatLoggerBase):
            def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
                pass

            def record(self, *args: Any, **kwargs: Any) -> None:
                heartbeat.last_step = time.monotonic()

            def log_engine_initialized(self) -> None:
                pass

        return HeartbeatStatLogger
