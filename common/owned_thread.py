"""The one start/stop shape of the backend's background threads.

A component owns one daemon thread (daemon: a stub whose model never unloads must still be able to exit). `stop()`
sets the `stopping` event, wakes the thread where it waits on something else (`wake`), and joins it within
`join_timeout_s` — except from the thread itself, which may stop its own component (the unload watch closes the
model it watches; the health monitor's unload ends with finalize()). Every bound is JOIN_TIMEOUT_S unless the
component says why its thread may take longer.

Not shaped like this, on purpose: the engine runner's event-loop thread (asyncio's `loop.stop()`, which ends
`run_forever`), the engine's start thread (it ends when vLLM's constructor returns: a future, not a stop), and the
parent watch (a process of its own, so that it outlives a stub that hangs).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

JOIN_TIMEOUT_S = 10.0


class OwnedThread:
    def __init__(self, target: Callable[[], None], name: str, join_timeout_s: float = JOIN_TIMEOUT_S,
                 wake: Callable[[], None] | None = None) -> None:
        self.stopping = threading.Event()
        self._thread = threading.Thread(target=target, name=name, daemon=True)
        self._join_timeout_s = join_timeout_s
        self._wake = wake

    @property
    def name(self) -> str:
        return self._thread.name

    def start(self) -> None:
        self._thread.start()

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def stop(self, join_timeout_s: float | None = None) -> bool:
        """Ask the thread to end and wait for it (bounded); True once it has ended, or never ran."""
        self.stopping.set()
        if self._wake is not None:
            self._wake()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(self._join_timeout_s if join_timeout_s is None else join_timeout_s)
        return not self._thread.is_alive()
