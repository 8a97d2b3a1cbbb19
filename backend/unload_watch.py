"""Bounds how long an unload or a server shutdown waits for running generations.

Triton finalizes a decoupled model only once every request it handed over has sent its final response, so an
unload (or a server shutdown) waits as long as the longest generation — forever, for a stuck one — and
`finalize()` comes too late to enforce a bound. This thread notices instead that Triton no longer reports this
model version ready (an unload began), then lets running requests finish for up to UNLOAD_DRAIN_TIMEOUT_S and
ends the rest with an error saying so.

A shutdown looks different: tritonserver 2.51 closes its HTTP endpoint as soon as it is signalled, so the readiness
check is refused instead of answered. Then the engine is also shut down here, within the server's exit timeout,
because `finalize()` may never come: Triton's gRPC frontend (before 25.04) keeps a model referenced for good when a
client cancels a stream between its final response and the end of the RPC, so the model never unloads and the
server exits at the end of its exit timeout with the engine never shut down (its shared memory left behind).

Readiness is asked over the server's own HTTP endpoint: `pb_utils.is_model_ready` from a thread other than
`execute()`'s corrupts the stub's shared memory (Triton 2.51 aborted with `boost::interprocess::lock_exception`).
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from enum import Enum
from typing import Any

from ..common.owned_thread import OwnedThread


class Readiness(Enum):
    READY = "ready"
    NOT_READY = "not ready"  # 400: the version is being unloaded
    SERVER_EXITING = "server exiting"  # refused: nothing listens on the server's HTTP port any more
    UNKNOWN = "unknown"  # no answer that tells either way (a timeout, another status)


def http_readiness(base_url: str, model: str, version: str) -> Callable[[], Readiness]:
    """What Triton's readiness endpoint says about this model version."""
    url = f"{base_url}/v2/models/{urllib.parse.quote(model)}/versions/{urllib.parse.quote(version)}/ready"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # the server is local: no proxy

    def ready() -> Readiness:
        try:
            with opener.open(url, timeout=2) as response:
                return Readiness.READY if response.status == 200 else Readiness.UNKNOWN
        except urllib.error.HTTPError as exc:
            return Readiness.NOT_READY if exc.code == 400 else Readiness.UNKNOWN
        except urllib.error.URLError as exc:  # how urllib reports a refused connection
            refused = isinstance(exc.reason, ConnectionRefusedError)
            return Readiness.SERVER_EXITING if refused else Readiness.UNKNOWN
        except OSError:
            return Readiness.UNKNOWN

    return ready


class UnloadWatch:
    """`on_unload(timeout)` on an unload (the instance's drain; an instance using another's shared engine passes
    its `close`: it leaves once drained); `close(timeout)` — drain, then shut the engine down — on a server exit,
    with the timeout cut to `exit_budget_s` (what the server's exit timeout leaves once the engine's shutdown is
    paid)."""

    def __init__(self, name: str, is_ready: Callable[[], Readiness], on_unload: Callable[[float], object],
                 close: Callable[[float], None], timeout_s: float, exit_budget_s: float, log: Any,
                 interval_s: float = 0.5) -> None:
        self._name = name
        self._is_ready = is_ready
        self._on_unload = on_unload
        self._close = close
        self._timeout_s = timeout_s
        self._exit_budget_s = exit_budget_s
        self._log = log
        self._interval_s = interval_s
        # longer than the others: the thread may be draining running requests, for up to UNLOAD_DRAIN_TIMEOUT_S
        self._thread = OwnedThread(self._run, "vllm-unload-watch", join_timeout_s=timeout_s + 5)
        self._stop = self._thread.stopping

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._thread.stop()

    def _ready(self) -> Readiness:
        try:
            return self._is_ready()
        except Exception:  # no answer is no evidence either way
            return Readiness.UNKNOWN

    def _run(self) -> None:
        seen_ready = False  # a model with several instances is ready only once the last one has loaded
        while not self._stop.wait(self._interval_s):
            ready = self._ready()
            if ready is Readiness.READY and not seen_ready:
                seen_ready = True
                self._log.info(f"unload watch: following Triton's readiness of {self._name}")
            if not seen_ready or ready in (Readiness.READY, Readiness.UNKNOWN):
                continue
            if ready is Readiness.NOT_READY:
                self._log.info(f"Triton no longer reports {self._name} ready (unload): running requests may "
                               f"finish for up to {self._timeout_s:g} s (UNLOAD_DRAIN_TIMEOUT_S)")
                self._on_unload(self._timeout_s)
                return
            bound = min(self._timeout_s, self._exit_budget_s)
            self._log.info(f"tritonserver is exiting (its HTTP endpoint closed): running requests of {self._name} "
                           f"may finish for up to {bound:g} s (UNLOAD_DRAIN_TIMEOUT_S, within the server's exit "
                           "timeout), then the engine shuts down")
            self._close(bound)
            return
