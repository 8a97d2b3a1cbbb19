"""Python's GIL switch interval, shortened only while a response thread is behind (`GIL_SWITCH_INTERVAL_MS` `auto`,
the default).

Each response's `send()` releases the GIL while Triton takes the response; to send the next one the response
thread must get it back. When the engine loop thread is busy — many streams of a fast engine — it keeps the GIL
until the interpreter makes it drop it, once per switch interval (Python's 5 ms): the responses of one engine step
then leave one per interval (docs/benchmarks.md, "Where the first token goes at 256 streams"). A short interval
cures that, but every thread then switches ten times as often, which is only cost while the stub keeps up. So the
interval is short only while some response thread is behind — it has spent longer than two of Python's intervals
on the responses it took at once (backend.lanes_behind) — and Python's again once every such thread has sent all it
had.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

RELAXED_S = 0.005  # Python's own: sys.getswitchinterval() of a fresh interpreter
HURRIED_S = 0.0005  # the short interval: 0.1 ms served 0.74–0.76 × the tokens/s of 0.5 ms on the H200


class SwitchInterval:
    """The process-wide interval: `relaxed_s` while no response thread is behind, `hurried_s` while one is. It hears
    the count of threads behind from backend.lanes_behind.LanesBehind, which calls `lanes_behind` in order."""

    def __init__(self, relaxed_s: float = RELAXED_S, hurried_s: float = HURRIED_S,
                 set_interval: Callable[[float], None] = sys.setswitchinterval) -> None:
        self.relaxed_s = relaxed_s
        self.hurried_s = hurried_s
        self._set = set_interval
        self._hurried = False
        self.hurries = 0  # how often the interval was shortened (read by tests and the unload log line)
        self._set(relaxed_s)

    def lanes_behind(self, count: int) -> None:
        if count and not self._hurried:
            self._hurried = True
            self._set(self.hurried_s)
            self.hurries += 1
        elif not count and self._hurried:
            self._hurried = False
            self._set(self.relaxed_s)
