"""Whether the response threads keep up with the engine: the one measure of the stub's front end being the limit.

A response thread takes every response waiting in its queue at once and sends them one by one, each an IPC round
trip to tritonserver. While it keeps up, a batch is sent within a few milliseconds; when the engine produces faster
than the thread can send (many streams of a fast engine, a stub process at a full core), batches take longer and
the streams' tokens reach their clients late. A thread is *behind* from BEHIND_AFTER_S after it took a batch, if it
has not sent it all by then, until it has sent everything and its queue is empty.

Two consumers read it: the adaptive GIL switch interval (backend.switch_interval: short only while a thread is
behind) and the metric vllm_triton_response_threads_behind_seconds_total (its rate is the average number of threads
behind: an operator's saturation signal, docs/metrics.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

BEHIND_AFTER_S = 0.010  # two of Python's GIL switch intervals: by then at least one send has waited a whole interval


class LanesBehind:
    """How many response threads are behind now, and the seconds they have spent behind, summed over threads.
    `on_change(count)` hears every change of the count, in order (it runs under this object's lock)."""

    def __init__(self, on_change: Callable[[int], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._on_change = on_change
        self._clock = clock
        self._lock = threading.Lock()
        self._running: dict[int, float] = {}  # a thread behind now (its LanePace's id) → when its spell began
        self._ended_s = 0.0  # the seconds of the spells that ended

    def fell_behind(self, lane: object, since: float) -> None:
        """`lane` has been behind since `since` (noticed now: at its next send)."""
        with self._lock:
            self._running[id(lane)] = since
            self._changed()

    def caught_up(self, lane: object) -> None:
        with self._lock:
            self._ended_s += self._clock() - self._running.pop(id(lane))
            self._changed()

    def seconds(self) -> float:
        """Thread-seconds spent behind so far, the spells still running included."""
        with self._lock:
            now = self._clock()
            return self._ended_s + sum(now - since for since in self._running.values())

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(len(self._running))


class LanePace:
    """One response thread's side: when it took its batch, whether it is behind now. A spell is counted from
    BEHIND_AFTER_S into the batch — however late the thread's next send notices it (a send that waited a second for
    tritonserver is a second behind) — until the thread has sent all it had."""

    def __init__(self, lanes: LanesBehind, behind_after_s: float = BEHIND_AFTER_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._lanes = lanes
        self._behind_after_s = behind_after_s
        self._clock = clock
        self._taken_at = 0.0
        self._behind = False

    def batch_taken(self) -> None:
        self._taken_at = self._clock()

    def before_send(self) -> None:
        if not self._behind and self._clock() - self._taken_at > self._behind_after_s:
            self._behind = True
            self._lanes.fell_behind(self, self._taken_at + self._behind_after_s)

    def batch_sent(self, more_waiting: bool) -> None:
        """The thread has sent its batch. With nothing more waiting it has caught up; with more, a batch that outlasted
        BEHIND_AFTER_S is behind from then on — also when its last send was its only one (one response that waited
        two seconds for a stopped tritonserver while the engine's next tokens queued up), which no send of that batch
        is left to notice."""
        if more_waiting:
            self.before_send()
        else:
            self.caught_up()

    def caught_up(self) -> None:
        """Everything it had is sent and nothing more is waiting."""
        if self._behind:
            self._behind = False
            self._lanes.caught_up(self)
