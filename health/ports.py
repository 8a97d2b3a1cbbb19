"""What the health monitor needs from the rest of the backend, defined here and implemented elsewhere.

The backend's engine runner and generation service implement `Engine` and `Requests`; the metrics room's health
families implement `Report` and its tracer `Incidents`. The composition root (`backend/model_instance.py`) hands
them to the monitor, so this room imports neither and its logic is unit-tested with fakes.
"""

from __future__ import annotations

import concurrent.futures
from typing import Protocol

from ..common.errors import RequestError
from ..common.vocabulary import HealthState


class Engine(Protocol):
    def running(self) -> bool:
        """An engine exists (False while one is being built or after shutdown)."""

    def dead_reason(self) -> str | None:
        """Why vLLM considers the engine dead, or None."""

    def start_probe(self, timeout_s: float) -> concurrent.futures.Future[float]:
        """A cheap round trip to the engine core, without waiting; the future's result is its latency in seconds."""

    def progress(self) -> float:
        """Seconds the engine's threads that answer a probe have run or waited for a CPU, as a running total: it
        stands still when the engine is hung (stopped, deadlocked), and moves when it is only short of CPU."""

    def generate_one_token(self, timeout_s: float) -> None:
        """Serve a real one-token request; raise if the engine cannot within the timeout."""

    def restart(self) -> None:
        """Replace the engine in place; raise if the new one does not start."""


class Requests(Protocol):
    def inflight_count(self) -> int: ...

    def refuse_new_requests(self, error: RequestError | None) -> None:
        """Answer new requests with `error` until called with None."""

    def fail_inflight(self, error: RequestError) -> None:
        """End every request in flight with `error`."""


class Report(Protocol):
    def update(self, state: HealthState, failures: int) -> None: ...

    def probe_latency(self, seconds: float) -> None: ...

    def restarted(self) -> None: ...


class Incidents(Protocol):
    """A health incident as a trace: from unhealthy to recovered (or given up), with each restart attempt in it."""

    def unhealthy(self, cause: str) -> None: ...

    def restart_started(self, attempt: int, attempts: int, backoff_s: float) -> None: ...

    def restart_ended(self, error: str | None) -> None:
        """The attempt begun last ended: None when the new engine started, else why it did not."""

    def recovered(self, cause: str) -> None: ...

    def not_recovered(self, action: str) -> None:
        """The incident ends without recovery: `action` says what happens instead (unloading, or staying loaded
        and refusing requests)."""

    def stopped(self) -> None:
        """The monitor stops (the model unloads): an incident still open ends here."""
