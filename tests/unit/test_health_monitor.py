"""The health monitor's probe timeout, recovery policies, restart backoff and stop, through `health.ports` fakes.

On a fake clock that moves only when the test ticks (the restart backoff's wait moves it too), with short settings
(tens of milliseconds); one test runs the monitor's own thread on real time. The real-engine faults are in
tests/integration/test_health.py.
"""

from __future__ import annotations

import concurrent.futures
import threading
import time

import pytest

from vllm_triton_observable.common.engine_activity import EngineActivity
from vllm_triton_observable.common.errors import EngineUnavailable
from vllm_triton_observable.common.vocabulary import HealthState
from vllm_triton_observable.health.monitor import HealthMonitor
from vllm_triton_observable.health.settings import HealthSettings, Recovery

FAST = dict(enabled=True, check_interval_s=0.01, probe_timeout_s=0.05, degraded_probe_s=0.02, failure_threshold=2,
            stall_timeout_s=30.0, restart_max_attempts=2, restart_backoff_s=0.05)


class FakeClock:
    """Monotonic seconds that move only when the test moves them; `pause` is the backoff's wait, never stopped."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def pause(self, seconds: float) -> bool:
        self.now += seconds
        return False


class FakeEngine:
    """An engine whose probe answers instantly, never (hung), and which can be dead or fail to restart."""

    def __init__(self, clock=time.monotonic) -> None:
        self.clock = clock
        self.dead: str | None = None
        self.hung = False
        self.starved = False  # its threads run or wait for a CPU (a busy machine); else a hung one stands still
        self.probes: list[concurrent.futures.Future[float]] = []
        self.restart_failures = 0
        self.restarts: list[float] = []
        self.generates = 0

    def running(self) -> bool:
        return True

    def dead_reason(self) -> str | None:
        return self.dead

    def start_probe(self, timeout_s: float) -> concurrent.futures.Future[float]:
        future: concurrent.futures.Future[float] = concurrent.futures.Future()
        if not self.hung:
            future.set_result(0.001)
        self.probes.append(future)
        return future

    def progress(self) -> float:
        return self.clock() if self.starved else 0.0

    def generate_one_token(self, timeout_s: float) -> None:
        self.generates += 1
        if self.hung:
            raise TimeoutError

    def restart(self) -> None:
        self.restarts.append(self.clock())
        if len(self.restarts) <= self.restart_failures:
            raise RuntimeError("no memory")
        self.dead, self.hung = None, False


class FakeRequests:
    def __init__(self) -> None:
        self.refusal: list[Exception | None] = []
        self.failed: list[Exception] = []
        self.inflight = 0

    def inflight_count(self) -> int:
        return self.inflight

    def refuse_new_requests(self, error: Exception | None) -> None:
        self.refusal.append(error)

    def fail_inflight(self, error: Exception) -> None:
        self.failed.append(error)


class FakeReport:
    def __init__(self) -> None:
        self.states: list[HealthState] = []
        self.latencies: list[float] = []
        self.restart_count = 0

    def update(self, state: HealthState, failures: int) -> None:
        if not self.states or self.states[-1] is not state:
            self.states.append(state)

    def probe_latency(self, seconds: float) -> None:
        self.latencies.append(seconds)

    def restarted(self) -> None:
        self.restart_count += 1


class FakeIncidents:
    """Records the incident calls as (name, arguments)."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def __getattr__(self, name: str):
        return lambda *args: self.calls.append((name, *args))

    def names(self) -> list[str]:
        return [call[0] for call in self.calls]


class Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def __getattr__(self, level: str):
        return lambda message: self.lines.append(f"{level}: {message}")


def monitor(recovery: Recovery, unload=None, incidents=None, real_time=False, **overrides):
    clock = None if real_time else FakeClock()
    engine = FakeEngine(clock or time.monotonic)
    requests, report, log = FakeRequests(), FakeReport(), Log()
    settings = HealthSettings(**{**FAST, "recovery": recovery, **overrides})
    timing = {} if clock is None else {"pause": clock.pause}
    m = HealthMonitor(settings, "m", engine=engine, requests=requests,
                      activity=EngineActivity(clock or time.monotonic), log=log, report=report, unload=unload,
                      incidents=incidents, **timing)
    m.test_clock = clock
    return m, engine, requests, report, log


def tick_for(m: HealthMonitor, seconds: float) -> None:
    """Ticks 5 ms apart on the fake clock, for `seconds` of its time."""
    deadline = m.test_clock.now + seconds
    while m.test_clock.now < deadline:
        m.tick()
        m.test_clock.now += 0.005


def test_a_probe_that_never_answers_times_out_degrades_then_fails():
    m, engine, requests, report, log = monitor(Recovery.FAIL)
    tick_for(m, 0.05)
    assert report.latencies and report.states == [HealthState.HEALTHY]
    engine.hung = True
    tick_for(m, 0.3)
    assert report.states == [HealthState.HEALTHY, HealthState.DEGRADED, HealthState.UNHEALTHY]
    assert any("no answer within 0.05 s (HEALTH_PROBE_TIMEOUT_S)" in line for line in log.lines), log.lines
    unanswered = [p for p in engine.probes if p.cancelled() or not p.done()]
    assert len(unanswered) >= 2 and all(p.cancelled() for p in unanswered[:-1])  # timed out probes are cancelled
    assert isinstance(requests.refusal[-1], EngineUnavailable) and isinstance(requests.failed[-1], EngineUnavailable)
    assert engine.restarts == []  # `fail` never restarts


def test_an_idle_engine_short_of_cpu_waits_degraded_and_is_healthy_once_it_answers():
    """A late probe of an idle engine whose threads run or wait for a CPU: a busy machine (another engine loading
    beside it), not a hung engine. It waits on, degraded, never failed; its answer makes the engine healthy."""
    m, engine, requests, report, log = monitor(Recovery.FAIL, stall_timeout_s=0.4)
    tick_for(m, 0.05)
    engine.hung = engine.starved = True
    tick_for(m, 0.3)  # six probe timeouts: a hung engine would be unhealthy by now (test above)
    assert report.states == [HealthState.HEALTHY, HealthState.DEGRADED] and requests.failed == []
    assert any("but the engine's threads run or wait for a CPU: a busy machine, not a hung engine" in line
               for line in log.lines), log.lines
    late = engine.probes[-1]
    assert not late.done() and m.evaluator.consecutive_failures == 0
    engine.hung = False
    late.set_result(0.3)
    tick_for(m, 0.1)
    assert report.states[-1] is HealthState.HEALTHY and requests.failed == []


def test_a_probe_kept_waiting_longer_than_the_stall_timeout_fails_even_on_a_busy_machine():
    m, engine, requests, report, log = monitor(Recovery.FAIL, stall_timeout_s=0.1)
    engine.hung = engine.starved = True
    tick_for(m, 0.6)
    assert report.states[-1] is HealthState.UNHEALTHY
    assert any("no answer within 0.1 s (HEALTH_STALL_TIMEOUT_S)" in line for line in log.lines), log.lines


def test_probes_that_wait_behind_a_long_step_leave_it_to_the_stall_watchdog():
    """Requests in flight, no step and no probe answer for several probe timeouts: degraded, not unhealthy, until
    HEALTH_STALL_TIMEOUT_S; then the stall fails the requests."""
    m, engine, requests, report, log = monitor(Recovery.FAIL, stall_timeout_s=0.4)
    requests.inflight, engine.hung = 3, True
    tick_for(m, 0.3)  # six probe timeouts
    assert report.states == [HealthState.HEALTHY, HealthState.DEGRADED] and requests.failed == []
    assert any("engine probe waited behind a long engine step" in line for line in log.lines), log.lines
    tick_for(m, 0.2)
    assert report.states == [HealthState.HEALTHY, HealthState.DEGRADED, HealthState.UNHEALTHY]
    assert "no engine progress" in str(requests.failed[-1])


def test_fail_recovers_when_the_engine_generates_again():
    incidents = FakeIncidents()
    m, engine, requests, report, _ = monitor(Recovery.FAIL, incidents=incidents)
    engine.hung = True
    tick_for(m, 0.3)
    assert m.evaluator.state is HealthState.UNHEALTHY and engine.generates > 0
    engine.hung = False
    tick_for(m, 0.1)
    assert m.evaluator.state is HealthState.HEALTHY
    assert requests.refusal[-1] is None and report.states[-1] is HealthState.HEALTHY
    assert incidents.names() == ["unhealthy", "recovered"]  # degraded is not an incident
    assert incidents.calls[-1] == ("recovered", "the engine generates again")


def test_restart_backs_off_exponentially_and_recovers():
    incidents = FakeIncidents()
    m, engine, requests, report, log = monitor(Recovery.RESTART, incidents=incidents, restart_max_attempts=3)
    engine.dead, engine.restart_failures = "EngineCore died", 1
    started = m.test_clock.now
    m.tick()  # dead → unhealthy → restart (blocks through the backoff, as on the monitor's thread)
    first, second = engine.restarts
    assert (first - started, second - first) == pytest.approx((0.05, 0.1))  # backoff, then doubled
    assert report.restart_count == 1 and m.evaluator.state is HealthState.HEALTHY
    assert requests.refusal == [requests.refusal[0], None] and isinstance(requests.refusal[0], EngineUnavailable)
    assert any("engine restart attempt 1 failed: RuntimeError: no memory" in line for line in log.lines)
    assert incidents.calls == [
        ("unhealthy", "the engine is dead: EngineCore died"),
        ("restart_started", 1, 3, 0.05), ("restart_ended", "RuntimeError: no memory"),
        ("restart_started", 2, 3, 0.1), ("restart_ended", None),
        ("recovered", "engine restarted in place (attempt 2)")]


def test_restart_gives_up_and_unloads_when_it_may():
    unloaded, incidents = threading.Event(), FakeIncidents()
    m, engine, _, report, log = monitor(Recovery.RESTART, unload=unloaded.set, incidents=incidents)
    engine.dead, engine.restart_failures = "EngineCore died", 99
    m.tick()
    assert len(engine.restarts) == 2 and report.restart_count == 0
    assert unloaded.wait(2) and any("every restart attempt failed: unloading" in line for line in log.lines)
    assert incidents.names() == ["unhealthy", *["restart_started", "restart_ended"] * 2, "not_recovered"]
    assert incidents.calls[-1] == ("not_recovered", "unloading the model")


def test_restart_gives_up_and_stays_refusing_without_unload():
    m, engine, requests, _, log = monitor(Recovery.RESTART)
    engine.dead, engine.restart_failures = "EngineCore died", 99
    m.tick()
    probes = len(engine.probes)
    tick_for(m, 0.1)
    assert len(engine.probes) == probes and len(engine.restarts) == 2  # finished: no more probes or attempts
    assert isinstance(requests.refusal[-1], EngineUnavailable)
    assert any("the model stays loaded and refuses requests" in line for line in log.lines)


def test_unload_policy_unloads_at_once():
    unloaded = threading.Event()
    m, engine, _, _, _ = monitor(Recovery.UNLOAD, unload=unloaded.set)
    engine.dead = "EngineCore died"
    m.tick()
    assert unloaded.wait(2) and engine.restarts == []


def test_stop_interrupts_a_restart_backoff():
    incidents = FakeIncidents()
    m, engine, _, _, _ = monitor(Recovery.RESTART, incidents=incidents, restart_backoff_s=30.0, real_time=True)
    engine.dead = "EngineCore died"
    m.start()
    time.sleep(0.6)  # the monitor's thread noticed the death and waits out the 30-s backoff
    started = time.monotonic()
    m.stop()
    assert time.monotonic() - started < 2 and engine.restarts == []
    assert incidents.names() == ["unhealthy", "stopped"]  # no attempt began; the open incident ends at stop
