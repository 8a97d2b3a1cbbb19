"""Health settings, the state machine and server-flag parsing (pure logic; the real faults are integration tests)."""

import pytest

from vllm_triton_observable.common.engine_activity import EngineActivity
from vllm_triton_observable.common.errors import ConfigError
from vllm_triton_observable.common.server_flags import explicit_model_control, flag_value, metrics_allowed
from vllm_triton_observable.common.vocabulary import HealthState
from vllm_triton_observable.health.evaluator import HealthEvaluator, Observation
from vllm_triton_observable.health.settings import HealthSettings, Recovery


def config(**params):
    return {"parameters": {k: {"string_value": v} for k, v in params.items()}}


def test_settings_defaults_and_parsing():
    assert HealthSettings.from_model_config({}) == HealthSettings()
    settings = HealthSettings.from_model_config(config(
        ENABLE_VLLM_HEALTH_CHECK="true", HEALTH_CHECK_INTERVAL_S="0.5", HEALTH_STALL_TIMEOUT_S="3",
        HEALTH_RECOVERY="Unload", HEALTH_RESTART_MAX_ATTEMPTS="2"))
    assert settings.enabled and settings.check_interval_s == 0.5 and settings.stall_timeout_s == 3.0
    assert settings.recovery is Recovery.UNLOAD and settings.restart_max_attempts == 2


@pytest.mark.parametrize("key, value, message", [
    ("HEALTH_RECOVERY", "reboot", "use fail, unload or restart"),
    ("HEALTH_STALL_TIMEOUT_S", "-1", "is not a positive float"),
    ("HEALTH_RESTART_MAX_ATTEMPTS", "two", "is not a positive int"),
])
def test_bad_settings_are_named(key, value, message):
    with pytest.raises(ConfigError, match=f"{key}: .*{message}"):
        HealthSettings.from_model_config(config(**{key: value}))


SETTINGS = HealthSettings(enabled=True, stall_timeout_s=3, failure_threshold=2, degraded_probe_s=1)


def test_death_is_unhealthy_at_once_and_final():
    evaluator = HealthEvaluator(SETTINGS)
    transition = evaluator.evaluate(Observation(now=1, dead="EngineCore died"))
    assert transition.state is HealthState.UNHEALTHY and "EngineCore died" in transition.cause
    assert evaluator.evaluate(Observation(now=2, probe_latency=0.01)) is None
    assert evaluator.state is HealthState.UNHEALTHY


def test_stall_needs_requests_in_flight_and_no_progress():
    evaluator = HealthEvaluator(SETTINGS)
    assert evaluator.evaluate(Observation(now=100, inflight=0, last_progress=1)) is None  # idle is not a stall
    assert evaluator.evaluate(Observation(now=100, inflight=3, last_progress=98)) is None
    assert evaluator.evaluate(Observation(now=100, inflight=3, last_progress=99)) is None  # just busy
    transition = evaluator.evaluate(Observation(now=104, inflight=3, last_progress=99))
    assert transition.state is HealthState.UNHEALTHY
    assert "no engine progress for 5.0 s with 3 request(s)" in transition.cause


def test_progress_is_the_later_of_the_last_step_and_the_start_of_the_busy_spell():
    """One measure for the stall watchdog and the published liveness timestamp (common.engine_activity)."""
    clock = iter([10.0, 20.0, 30.0, 31.0, 40.0, 50.0, 60.0]).__next__
    activity = EngineActivity(clock)
    assert activity.last_progress(0) == 10.0  # idle: now
    assert activity.last_progress(2) == 20.0  # busy from now on: no step of its own yet
    assert activity.last_progress(2) == 20.0  # clock 30: still the start of the busy spell
    activity.stepped()  # clock 31
    assert activity.last_progress(2) == 31.0  # clock 40: the last step
    activity.new_engine()  # a replacement: neither the old step nor the old busy spell counts
    assert activity.last_progress(2) == 50.0
    assert activity.last_progress(0) == 60.0


def test_probe_failures_degrade_then_fail_and_a_probe_alone_does_not_recover():
    evaluator = HealthEvaluator(SETTINGS)
    assert evaluator.evaluate(Observation(now=1, probe_error="timeout")).state is HealthState.DEGRADED
    assert evaluator.evaluate(Observation(now=2, probe_error="timeout")).state is HealthState.UNHEALTHY
    assert evaluator.evaluate(Observation(now=3, probe_latency=0.01)) is None
    assert evaluator.recovered("generates again").state is HealthState.HEALTHY
    assert evaluator.consecutive_failures == 0


def test_a_probe_that_waits_behind_a_running_step_degrades_and_the_stall_watchdog_decides():
    """With requests in flight the EngineCore answers the probe only after its current step: a timeout then means
    a long step, not a hang, however many in a row; an idle engine's timeouts and any engine error still count."""
    evaluator = HealthEvaluator(SETTINGS)
    busy = {"inflight": 2, "probe_error": "no answer within 1 s", "probe_timed_out": True}
    transition = evaluator.evaluate(Observation(now=1, last_progress=0.9, **busy))
    assert transition.state is HealthState.DEGRADED and "waited behind a long engine step" in transition.cause
    assert evaluator.evaluate(Observation(now=2, last_progress=0.9, **busy)) is None
    assert evaluator.evaluate(Observation(now=3, last_progress=0.9, **busy)) is None
    assert evaluator.consecutive_failures == 0
    assert evaluator.evaluate(Observation(now=3.5, inflight=2, last_progress=3.4, probe_latency=0.2)).state is (
        HealthState.HEALTHY)  # the step ended and the probe was answered
    transition = evaluator.evaluate(Observation(now=7, last_progress=3.4, **busy))  # past the 3-s stall timeout
    assert transition.state is HealthState.UNHEALTHY and "no engine progress for 3.6 s" in transition.cause

    idle = HealthEvaluator(SETTINGS)
    for now in (1, 2):
        transition = idle.evaluate(Observation(now=now, probe_error="no answer within 1 s", probe_timed_out=True))
    assert transition.state is HealthState.UNHEALTHY and "2 consecutive engine probes failed" in transition.cause
    errors = HealthEvaluator(SETTINGS)  # busy, but the engine answered with an error: that is no long step
    for now in (1, 2):
        transition = errors.evaluate(Observation(now=now, inflight=2, last_progress=now, probe_error="EngineDeadError"))
    assert transition.state is HealthState.UNHEALTHY


def test_slow_probe_is_degraded_and_a_fast_one_heals():
    evaluator = HealthEvaluator(SETTINGS)
    assert evaluator.evaluate(Observation(now=1, probe_latency=1.5)).state is HealthState.DEGRADED
    assert evaluator.evaluate(Observation(now=2, probe_latency=1.6)) is None  # logged once
    assert evaluator.evaluate(Observation(now=3, probe_latency=0.01)).state is HealthState.HEALTHY


def test_server_flags():
    argv = ["tritonserver", "--model-control-mode", "explicit", "--allow-metrics=false"]
    assert flag_value(argv, "model-control-mode") == "explicit"
    assert explicit_model_control(argv) and not metrics_allowed(argv)
    assert metrics_allowed(["tritonserver"]) and not explicit_model_control(["tritonserver"])
