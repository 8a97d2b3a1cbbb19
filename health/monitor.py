"""The background health monitor: death, stall watchdog, active probe, and the recovery policy.

It runs in its own thread, never on the request path. Each tick (0.25 s) reads vLLM's dead-engine state, the
in-flight count and the engine's last step; every HEALTH_CHECK_INTERVAL_S it asks vLLM's own `check_health()` and
sends a cheap round trip to the EngineCore (`is_sleeping`) without waiting for them, so a hung engine is noticed
by the probe's timeout while death and stalls are still checked every tick.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any

from ..common.engine_activity import EngineActivity
from ..common.errors import EngineUnavailable
from ..common.owned_thread import OwnedThread
from ..common.vocabulary import HealthState
from .evaluator import HealthEvaluator, Observation, Transition
from .ports import Engine, Incidents, Report, Requests
from .settings import HealthSettings, Recovery

TICK_S = 0.25
# The official backend's answer to a request that meets an unhealthy engine: its clients and tests match it, so it
# comes first; the model and the cause follow.
UNHEALTHY_ANSWER = "Model is unavailable due to unhealthy vLLM engine"
# A late probe's engine threads that ran or waited for a CPU this long meanwhile were short of CPU, not hung.
PROGRESS_MIN_S = 0.001


class _Untraced:
    """The incidents of a monitor without a tracer: nothing to record."""

    def unhealthy(self, cause: str) -> None: ...

    def restart_started(self, attempt: int, attempts: int, backoff_s: float) -> None: ...

    def restart_ended(self, error: str | None) -> None: ...

    def recovered(self, cause: str) -> None: ...

    def not_recovered(self, action: str) -> None: ...

    def stopped(self) -> None: ...


class HealthMonitor:
    def __init__(
        self,
        settings: HealthSettings,
        model_name: str,
        engine: Engine,
        requests: Requests,
        activity: EngineActivity,
        log: Any,
        report: Report | None = None,
        unload: Callable[[], None] | None = None,
        incidents: Incidents | None = None,
        pause: Callable[[float], bool] | None = None,
    ) -> None:
        """Every decision reads the activity's clock (monotonic), the one its progress is measured on;
        `pause(seconds)`: the restart backoff's wait, True when the monitor was stopped meanwhile (default: on
        the stop event). Tests give the activity a fake clock, pass its pause, and tick by hand."""
        self.settings = settings
        self.evaluator = HealthEvaluator(settings)
        self._model = model_name
        self._engine = engine
        self._requests = requests
        self._activity = activity
        self._clock = activity.now
        self._log = log
        self._report = report
        self._unload = unload
        self._incidents: Incidents = incidents or _Untraced()
        self._thread = OwnedThread(self._run, "vllm-health")  # a probe never blocks it: futures, not waits
        self._stop = self._thread.stopping
        self._pause = pause or self._stop.wait
        # the probe in flight: when it started, its answer, and the engine's progress() then
        self._probe: tuple[float, concurrent.futures.Future[Any], float] | None = None
        self._next_probe = 0.0
        self._finished = False  # unloaded or out of restart attempts: nothing more to do

    def start(self) -> None:
        self._log.info(f"health monitor on: probe every {self.settings.check_interval_s:g} s "
                       f"(timeout {self.settings.probe_timeout_s:g} s), stall timeout "
                       f"{self.settings.stall_timeout_s:g} s, recovery {self.settings.recovery.value}")
        self._thread.start()

    def stop(self) -> None:
        self._thread.stop()
        self._incidents.stopped()

    # -- one tick ---------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.wait(TICK_S):
            try:
                self.tick()
            except Exception as exc:  # the monitor must outlive anything it observes
                self._log.error(f"health monitor error: {type(exc).__name__}: {exc}")

    def tick(self) -> None:
        now = self._clock()
        inflight = self._requests.inflight_count()
        latency, error, timed_out, waiting = self._probe_result(now, inflight)
        observation = Observation(now=now, dead=self._engine.dead_reason(), inflight=inflight,
                                  last_progress=self._activity.last_progress(inflight),
                                  probe_latency=latency, probe_error=error, probe_timed_out=timed_out,
                                  probe_waiting_s=waiting)
        if latency is not None and self._report is not None:
            self._report.probe_latency(latency)
        transition = self.evaluator.evaluate(observation)
        if transition is not None:
            self._on_transition(transition)
        elif self.evaluator.state is HealthState.UNHEALTHY and not self._finished:
            self._try_to_recover()
        self._publish()

    def _probe_bound_s(self) -> float:
        """How long a probe of an engine that is short of CPU may wait: as long as an engine step may take."""
        return max(self.settings.probe_timeout_s, self.settings.stall_timeout_s)

    def _probe_result(self, now: float, inflight: int) -> tuple[float | None, str | None, bool, float | None]:
        """Start a probe when due; report one that finished or failed: (latency, error, whether it timed out, how
        long an idle engine that is short of CPU has kept it waiting)."""
        if self._probe is None:
            if now >= self._next_probe and self._engine.running() and not self._finished:
                progress = self._engine.progress()
                self._probe = (now, self._engine.start_probe(self._probe_bound_s()), progress)
            return None, None, False, None
        started, future, progress = self._probe
        if future.done():
            self._probe = None
            self._next_probe = now + self.settings.check_interval_s
            exc = future.exception()
            if exc is None:
                return future.result(), None, False, None
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            return None, error, isinstance(exc, TimeoutError), None
        waited = now - started
        if waited <= self.settings.probe_timeout_s:
            return None, None, False, None
        # Idle, late, but its threads ran or waited for a CPU meanwhile: a busy machine, not a hung engine (under
        # load, a late probe is the long-step rule's and the stall watchdog's call instead).
        if inflight == 0 and waited <= self._probe_bound_s() and (
                self._engine.progress() - progress > PROGRESS_MIN_S):
            return None, None, False, waited
        future.cancel()
        self._probe = None
        self._next_probe = now + self.settings.check_interval_s
        if waited > self._probe_bound_s() and inflight == 0:
            return None, f"no answer within {self._probe_bound_s():g} s (HEALTH_STALL_TIMEOUT_S)", True, None
        return None, (f"no answer within {self.settings.probe_timeout_s:g} s (HEALTH_PROBE_TIMEOUT_S), and the "
                      "engine's threads neither ran nor waited for a CPU meanwhile"
                      if inflight == 0 else
                      f"no answer within {self.settings.probe_timeout_s:g} s (HEALTH_PROBE_TIMEOUT_S)"), True, None

    # -- transitions and recovery -----------------------------------------------------------------
    def _on_transition(self, transition: Transition) -> None:
        log = self._log.error if transition.state is HealthState.UNHEALTHY else self._log.warn if (
            transition.state is HealthState.DEGRADED) else self._log.info
        log(f"engine health: {transition.state.value} — {transition.cause}")
        if transition.state is not HealthState.UNHEALTHY:
            return
        self._incidents.unhealthy(transition.cause)
        error = EngineUnavailable(f"{UNHEALTHY_ANSWER} (model {self._model} is unavailable: {transition.cause})")
        self._requests.refuse_new_requests(error)
        self._requests.fail_inflight(error)
        self._publish()
        if self.settings.recovery is Recovery.UNLOAD:
            self._log.error(f"Engine is not healthy and model will be unloaded: {transition.cause}")
            self._incidents.not_recovered("unloading the model (HEALTH_RECOVERY=unload)")
            self._unload_model()
        elif self.settings.recovery is Recovery.RESTART:
            self._restart()

    def _try_to_recover(self) -> None:
        """Under `fail` (or after a failed restart), a hung engine that serves a real request is healthy again."""
        if self.evaluator.dead or self._clock() < self._next_probe:
            return
        self._next_probe = self._clock() + self.settings.check_interval_s
        try:
            self._engine.generate_one_token(self.settings.probe_timeout_s)
        except Exception:
            return
        self._recovered("the engine generates again")

    def _recovered(self, cause: str) -> None:
        transition = self.evaluator.recovered(cause)
        self._requests.refuse_new_requests(None)
        self._incidents.recovered(cause)
        if transition is not None:
            self._on_transition(transition)

    def _restart(self) -> None:
        for attempt in range(1, self.settings.restart_max_attempts + 1):
            wait = self.settings.restart_backoff_s * 2 ** (attempt - 1)
            self._log.warn(f"restarting the engine in {wait:g} s (attempt {attempt} of "
                           f"{self.settings.restart_max_attempts})")
            if self._pause(wait) or self._stop.is_set():
                return
            self._incidents.restart_started(attempt, self.settings.restart_max_attempts, wait)
            try:
                self._engine.restart()
            except Exception as exc:
                self._log.error(f"engine restart attempt {attempt} failed: {type(exc).__name__}: {exc}")
                self._incidents.restart_ended(f"{type(exc).__name__}: {exc}")
                continue
            self._incidents.restart_ended(None)
            self._probe = None
            self._activity.new_engine()
            if self._report is not None:
                self._report.restarted()
            self._recovered(f"engine restarted in place (attempt {attempt})")
            return
        action = ("unloading the model" if self._unload is not None
                  else "the model stays loaded and refuses requests")
        self._log.error(f"every restart attempt failed: {action}")
        self._incidents.not_recovered(action)
        if self._unload is not None:
            self._unload_model()
        else:
            self._finished = True

    def _unload_model(self) -> None:
        self._finished = True
        if self._unload is None:
            return
        # pb_utils.unload_model asks the server to unload us, which calls finalize(), which stops this thread:
        # call it from a thread of its own so nothing waits on itself.
        threading.Thread(target=self._unload, name="vllm-unload", daemon=True).start()

    def _publish(self) -> None:
        if self._report is not None:
            self._report.update(self.evaluator.state, self.evaluator.consecutive_failures)
