"""What the engine is doing, as far as the rest of the backend needs to know: when it last made a step, when it
last made progress, and whether it is serving a request of the backend's own (a warm-up, a recovery check) with no
client request beside it.

One object per model instance. Its writers: one stat logger (`stat_logger_class`: vLLM calls every stat logger once
per engine step that produced output, metrics on or off) and the engine runner (its own requests). Its readers: the
health monitor's stall watchdog and the metric families (the liveness timestamp; vLLM's families leave the backend's
own requests out). Both read progress through `last_progress`, so the watchdog and the published timestamp are one
measure. Times are the clock's (monotonic), so a step of the wall clock cannot fake an age.
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
        self._busy_since: float | None = None  # when requests last went from none to some in flight
        self.serving_own_request = False

    def now(self) -> float:
        return self._clock()

    def stepped(self) -> None:
        self.last_step = self._clock()

    def new_engine(self) -> None:
        """A replacement engine has made no step yet: the old one's steps, and how long its requests waited, say
        nothing about it."""
        self.last_step = None
        self._busy_since = None

    def last_progress(self, inflight: int) -> float:
        """The clock's time the engine last made progress: now while no request is in flight (an idle engine owes
        nothing); while busy, its last step or the moment it became busy, whichever came later. Every reader passes
        the in-flight count it sees; the first to see requests after an idle spell marks the start of the busy one."""
        now = self._clock()
        if inflight <= 0:
            self._busy_since = None
            return now
        if self._busy_since is None:
            self._busy_since = now
        return max(self._busy_since, self.last_step or self._busy_since)

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
