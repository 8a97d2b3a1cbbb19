"""Python's GIL switch interval, shortened only while a response thread is behind (`GIL_SWITCH_INTERVAL_MS` `auto`,
the default).

Each response's `send()` releases the GIL while Triton takes the response; to send the next one the response
thread must get it back. When the engine loop thread is busy — many streams of a fast engine — it keeps the GIL
until the interpreter makes it drop it, once per switch interval (Python's 5 ms): the responses of one engine step
then leave one per interval (docs/benchmarks.md, "Where the first token goes at 256 streams"). A short interval
cures that, but every thread then switches ten times as often, which is only cost while the stub keeps up. So the
interval is short only while some response thread is behind — it has spent longer than two of Python's intervals
on the responses it took at once — and Python's again once every such thread has sent all it had.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

RELAXED_S = 0.005  # Python's own: sys.getswitchinterval() of a fresh interpreter
HURRIED_S = 0.0005  # the short interval: 0.1 ms served 0.74–0.76 × the tokens/s of 0.5 ms on the H200
BEHIND_AFTER_S = 0.010  # two of Python's intervals: by then at least one send has waited a whole interval


class SwitchInterval:
    """The process-wide interval: `relaxed_s` while no response thread is behind, `hurried_s` while one is."""

    def __init__(self, relaxed_s: float = RELAXED_S, hurried_s: float = HURRIED_S,
                 set_interval: Callable[[float], None] = sys.setswitchinterval) -> None:
        self.relaxed_s = relaxed_s
        self.hurried_s = hurried_s
        self._set = set_interval
        self._lock = threading.Lock()
        self._behind = 0  # response threads behind now
        self.hurries = 0  # how often the interval was shortened (read by tests and the unload log line)
        self._set(relaxed_s)

    def hurry(self) -> None:
        with self._lock:
            self._behind += 1
            if self._behind == 1:
                self._set(self.hurried_s)
                self.hurries += 1

    def relax(self) -> None:
        with self._lock:
            self._behind -= 1
            if self._behind == 0:
                self._set(self.relaxed_s)


class LanePace:
    """One response thread's side: when it took its batch, whether it is behind now."""

    def __init__(self, interval: SwitchInterval, behind_after_s: float = BEHIND_AFTER_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._interval = interval
        self._behind_after_s = behind_after_s
        self._clock = clock
        self._taken_at = 0.0
        self._behind = False

    def batch_taken(self) -> None:
        self._taken_at = self._clock()

    def before_send(self) -> None:
        if not self._behind and self._clock() - self._taken_at > self._behind_after_s:
            self._behind = True
            self._interval.hurry()

    def caught_up(self) -> None:
        """Everything it had is sent and nothing more is waiting."""
        if self._behind:
            self._behind = False
            self._interval.relax()
