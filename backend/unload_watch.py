"""Bounds how long an unload waits for running generations.

Triton finalizes a decoupled model only once every request it handed over has sent its final response, so an
unload (or a server shutdown) waits as long as the longest generation — forever, for a stuck one — and
`finalize()` comes too late to enforce a bound. This thread notices instead that Triton no longer reports this
model version ready (an unload or shutdown began), then lets running requests finish for up to
UNLOAD_DRAIN_TIMEOUT_S and ends the rest with an error saying so.

Readiness is asked over the server's own HTTP endpoint: `pb_utils.is_model_ready` from a thread other than
`execute()`'s corrupts the stub's shared memory (Triton 2.51 aborted with `boost::interprocess::lock_exception`).
"""

from __future__ import annotations

import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any


def http_readiness(base_url: str, model: str, version: str) -> Callable[[], bool | None]:
    """True (200) or False (400: not ready) from Triton's readiness endpoint; None when it cannot tell."""
    url = f"{base_url}/v2/models/{urllib.parse.quote(model)}/versions/{urllib.parse.quote(version)}/ready"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the server is local: no proxy

    def ready() -> bool | None:
        try:
            with opener.open(url, timeout=2) as response:
                return response.status == 200
        except urllib.error.HTTPError as exc:
            return False if exc.code == 400 else None
        except OSError:
            return None

    return ready


class UnloadWatch:
    def __init__(self, name: str, is_ready: Callable[[], bool | None], drain: Callable[[float], int],
                 timeout_s: float, log: Any, interval_s: float = 0.5) -> None:
        self._name = name
        self._is_ready = is_ready
        self._drain = drain
        self._timeout_s = timeout_s
        self._log = log
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="vllm-unload-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(self._timeout_s + 5)

    def _ready(self) -> bool | None:
        try:
            return self._is_ready()
        except Exception:  # no answer is no evidence either way
            return None

    def _run(self) -> None:
        seen_ready = False  # a model with several instances is ready only once the last one has loaded
        while not self._stop.wait(self._interval_s):
            ready = self._ready()
            if ready is True and not seen_ready:
                seen_ready = True
                self._log.info(f"unload watch: following Triton's readiness of {self._name}")
            if not seen_ready or ready is not False:
                continue
            self._log.info(f"Triton no longer reports {self._name} ready (unload or shutdown): running requests "
                           f"may finish for up to {self._timeout_s:g} s (UNLOAD_DRAIN_TIMEOUT_S)")
            self._drain(self._timeout_s)
            return
