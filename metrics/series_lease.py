"""One load of a model instance at a time publishes that instance's series to Triton.

Triton loads a loaded model again (explicit mode, its files changed) by starting the new instances before it
unloads the old ones, and both loads carry the same model, version and instance name, so the same labels on every
series. Triton 2.51 merges metric families of one name, and `Family::Add` of labels already there returns the
series already there: the two loads write one object. Triton counts the references to a series per family object,
not across them, so when the old load deletes its series at unload, the object the new load goes on writing is
freed — seen here as 382 of 395 series gone from /metrics after a reload, and as tritonserver aborting with
`malloc_consolidate(): unaligned fastbin chunk detected` and SIGSEGV.

So a load creates and writes series only while it holds this lease: an flock on a file named after the instance's
labels in a directory of tritonserver's (the caller's), released once every series it made is deleted — or when
its process ends, however it ends. A new load waits for the old one's unload (Triton unloads it once its running
generations have ended); until then the old load's series stay on /metrics, and the new load's counts wait in its
registry and are published whole when it takes over.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import time
from collections.abc import Callable
from pathlib import Path


class SeriesLease:
    def __init__(self, path: Path, say: Callable[[str], None], name: str) -> None:
        self._path = path
        self._say = say
        self._name = name
        self._fd: int | None = None  # opened at the first try, kept while waiting: a try is one flock() call
        self._held = False
        self._waiting_since: float | None = None

    @classmethod
    def for_labels(cls, directory: Path, labels: dict[str, str], say: Callable[[str], None]) -> SeriesLease:
        """The lease of the series carrying these constant labels (Triton's model, version and instance)."""
        name = ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))
        return cls(directory / f"{hashlib.sha256(name.encode()).hexdigest()[:16]}.lock", say, name)

    @property
    def held(self) -> bool:
        return self._held

    def try_acquire(self) -> bool:
        """Hold the lease if no other load does (never waits); say once that this load waits, and when it ends."""
        if self._held:
            return True
        if self._fd is None:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if self._waiting_since is None:
                self._waiting_since = time.monotonic()
                self._say(f"metrics: the series of {self._name} are still published by an earlier load of this "
                          "instance (a reload: Triton starts the new instances before it unloads the old ones); "
                          "this load publishes once that one is unloaded")
            return False
        self._held = True
        if self._waiting_since is not None:
            self._say(f"metrics: the earlier load released the series of {self._name} after "
                      f"{time.monotonic() - self._waiting_since:.1f} s; this load publishes them now")
            self._waiting_since = None
        return True

    def release(self) -> None:
        """After every series this load made is deleted (or before it ever held the lease)."""
        if self._fd is not None:
            os.close(self._fd)  # closing the only descriptor releases the flock
            self._fd, self._held = None, False
