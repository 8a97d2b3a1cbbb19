"""Values that several rooms name: how a request ended and how healthy the engine is.

The backend decides them, the health monitor moves between them, the metrics label series with them, and the
dashboards and alerts select on them — so they are spelled here once.
"""

from __future__ import annotations

import enum


class Outcome(enum.Enum):
    """How a request ended (the `outcome` label of vllm_triton_requests_finished_total)."""

    COMPLETED = "completed"
    CANCELLED = "cancelled"  # by the client
    REJECTED = "rejected"  # bad input
    REFUSED = "refused"  # a healthy engine did not take it (queue full, paused): a retry may succeed
    FAILED = "failed"  # engine or internal error


class HealthState(enum.Enum):
    """The `state` label of vllm_triton_engine_health_state."""

    HEALTHY = "healthy"
    DEGRADED = "degraded"  # answers, but slowly or after a failed probe
    UNHEALTHY = "unhealthy"  # dead, hung or not answering: requests are refused
