"""The health state machine: observations in, state transitions (with their cause) out. Pure logic.

The EngineCore answers a probe between engine steps, so a probe sent while requests run waits behind the running
step. One that times out then says "a long step" (seconds per step are normal for a large model on CPU, or while a
kernel is being compiled), not "a hung engine": it degrades, and how long a step may take is the stall watchdog's
call (HEALTH_STALL_TIMEOUT_S). Only probes of an idle engine count towards HEALTH_FAILURE_THRESHOLD.

An idle engine's late probe is judged by whether the engine's threads ran or waited for a CPU meanwhile (the
kernel's scheduler statistics, backend.process_progress): if they did, the machine is busy (another engine loading
beside this one) and the probe waits on, degraded, for up to HEALTH_STALL_TIMEOUT_S; if they stood still, the engine
is hung (stopped, deadlocked) and the probe failed.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..common.vocabulary import HealthState
from .settings import HealthSettings


@dataclass(frozen=True)
class Observation:
    now: float
    dead: str | None = None  # why vLLM considers the engine dead, if it does
    inflight: int = 0
    # when the engine last made progress: its last step or when requests went from none to some in flight,
    # whichever came later (common.engine_activity; the published liveness timestamp is the same measure)
    last_progress: float | None = None
    probe_latency: float | None = None  # a probe finished this tick, in this many seconds
    probe_error: str | None = None  # a probe failed this tick, with this reason
    probe_timed_out: bool = False  # ... because it got no answer in time (not an error from the engine)
    # a probe of an idle engine is this late, but the engine's threads ran or waited for a CPU meanwhile
    probe_waiting_s: float | None = None


@dataclass(frozen=True)
class Transition:
    state: HealthState
    cause: str


class HealthEvaluator:
    def __init__(self, settings: HealthSettings) -> None:
        self.settings = settings
        self.state = HealthState.HEALTHY
        self.cause = "engine started"
        self.consecutive_failures = 0
        self.dead = False

    def stalled_for(self, obs: Observation) -> float:
        """Seconds the engine has made no progress while requests are in flight (0 when idle)."""
        if obs.inflight <= 0 or obs.last_progress is None:
            return 0.0
        return max(0.0, obs.now - obs.last_progress)

    def evaluate(self, obs: Observation) -> Transition | None:
        """The new state, if it changed; the cause says why, once."""
        if self.dead:
            return None
        if obs.dead is not None:
            self.dead = True
            return self._move(HealthState.UNHEALTHY, f"the engine is dead: {obs.dead}")
        stalled = self.stalled_for(obs)
        if stalled > self.settings.stall_timeout_s:
            return self._move(HealthState.UNHEALTHY, f"no engine progress for {stalled:.1f} s with {obs.inflight} "
                                                     f"request(s) in flight (HEALTH_STALL_TIMEOUT_S="
                                                     f"{self.settings.stall_timeout_s:g})")
        if obs.probe_waiting_s is not None:
            if self.state is HealthState.HEALTHY:
                return self._move(HealthState.DEGRADED, f"engine probe unanswered after {obs.probe_waiting_s:.1f} s, "
                                                        "but the engine's threads run or wait for a CPU: a busy "
                                                        "machine, not a hung engine")
            return None
        if obs.probe_timed_out and obs.inflight > 0:
            if self.state is HealthState.HEALTHY:
                return self._move(HealthState.DEGRADED, f"engine probe waited behind a long engine step "
                                                        f"({obs.probe_error}, {obs.inflight} request(s) in flight)")
            return None
        if obs.probe_error is not None:
            self.consecutive_failures += 1
            if self.consecutive_failures >= self.settings.failure_threshold:
                return self._move(HealthState.UNHEALTHY, f"{self.consecutive_failures} consecutive engine probes "
                                                         f"failed, last: {obs.probe_error}")
            if self.state is HealthState.HEALTHY:
                return self._move(HealthState.DEGRADED, f"engine probe failed: {obs.probe_error}")
            return None
        if obs.probe_latency is not None:
            self.consecutive_failures = 0
            if self.state is HealthState.UNHEALTHY:
                return None  # leaving UNHEALTHY takes a real generation (see HealthMonitor), not a probe
            if obs.probe_latency > self.settings.degraded_probe_s:
                return self._move(HealthState.DEGRADED, f"engine probe took {obs.probe_latency:.2f} s "
                                                        f"(HEALTH_DEGRADED_PROBE_S={self.settings.degraded_probe_s:g})")
            return self._move(HealthState.HEALTHY, f"engine probe answered in {obs.probe_latency * 1000:.0f} ms")
        return None

    def recovered(self, cause: str) -> Transition | None:
        """The engine served a real request again (after SIGCONT, say) or was replaced."""
        self.dead = False
        self.consecutive_failures = 0
        return self._move(HealthState.HEALTHY, cause)

    def _move(self, state: HealthState, cause: str) -> Transition | None:
        if state is self.state:
            return None
        self.state, self.cause = state, cause
        return Transition(state, cause)
