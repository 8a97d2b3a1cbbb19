"""What the engine is doing, as far as the rest of the backend needs to know: when it last made a step, and
whether it is serving a request of the backend's own (a warm-up, a recovery check) with no client request beside it.

One object per model instance. Its writers: one stat logger (`stat_logger_class`: vLLM calls every stat logger once
per engine step that produced output, metrics on or off) and the engine runner (its own requests). Its readers: the
health monitor's stall watchdog and the metric families (the last-record timestamp; vLLM's families leave the
backend's own requests out). Times are monotonic, so a step of the wall clock cannot fake an age.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any


class EngineActivity:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.last_step: float | None = None  # the clock's time of the engine's last step with output
        self.serving_own_request = False

    def stepped(self) -> None:
        self.last_step = self._clock()

    def new_engine(self) -> None:
        """A replacement engine has made no step yet: the old one's last step says nothing about it."""
        self.last_step = None

    @contextlib.contextmanager
    def own_request(self) -> Iterator[None]:
        """While the backend serves a request of its own."""
        self.serving_own_request = True
        try:
            yield
        finally:
            self.serving_own_request = False

    def stat_logger_class(self) -> type:
        """A StatLoggerBase subclass vLLM instantiates per engine, bound to this object; it never raises (vLLM
        calls `record()` in its output handler, where an exception would mark the engine dead)."""
        from vllm.v1.metrics.loggers import StatLoggerBase

        activity = self

        class EngineActivityLogger(StatLoggerBase):
            def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
                pass

            def record(self, *args: Any, **kwargs: Any) -> None:
                activity.stepped()

            def log_engine_initialized(self) -> None:
                pass

        return EngineActivityLogger
