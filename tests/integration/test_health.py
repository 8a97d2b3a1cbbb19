"""Real faults on real engines: SIGKILL and SIGSTOP the EngineCore or the worker under streaming load.

On the shared explicit-mode server (needed by HEALTH_RECOVERY=unload; see conftest.py): a model per policy, with
short timeouts so that each fault resolves in seconds.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import time

import requests
from conftest import EXPLICIT_MODELS, EXPLICIT_STARTUP, FAST_HEALTH
from helpers import (
    Stream,
    engine_of,
    generate,
    ipc_directory,
    ipc_sockets,
    repository,
    scrape,
    series,
    snapshot,
    start_load,
    stub_of,
    value,
    wait_until,
)
from prometheus_server import Prometheus, generated_rules
from triton_launcher import gpu_present

from alerts.groups import engine_health, errors
from observability.promql import error_ratio
from vllm_triton_observable.health.monitor import UNHEALTHY_ANSWER
from vllm_triton_observable.metrics import names

# How soon after a killed engine process every stream has its error. vLLM notices at once (process sentinel) and
# the monitor ticks every 0.25 s; the rest is delivery on two cores the other test worker keeps busy starting
# engines (1.01 s seen once in CI). Still below what the probe (0.5 s + 1 s timeout, twice) or the stall
# watchdog (3 s) would take, so it proves the death path.
DEATH_BOUND_S = 1.5


# -- processes -------------------------------------------------------------------------------------
def engine_processes(server, model: str) -> tuple[int, int]:
    """(EngineCore pid, Worker pid) of a model's engine."""
    core, worker = engine_of(stub_of(server, model))
    return core.pid, worker.pid


def errors_after(streams: list[Stream], since: float, within: float) -> list[str]:
    for s in streams:
        s.join(within + 30)
    messages = []
    for s in streams:
        assert s.error is not None, f"a request did not end with an error: {s.events[-1:]}"
        at, message = s.error
        assert at - since <= within, f"error after {at - since:.2f} s (bound {within} s): {message}"
        messages.append(message)
    return messages


def metric(server, name: str, model: str, **labels: str) -> float:
    return value(scrape(server), name, model=model, **labels)


def model_ready(server, model: str) -> bool:
    return requests.get(f"{server.http_url}/v2/models/{model}/ready", timeout=5).status_code == 200


# -- a cold start -----------------------------------------------------------------------------------
def test_an_empty_compile_cache_cannot_stall_the_first_logprobs_request(explicit_server, cold_compile_cache):
    """vLLM builds its logprobs kernel (torch.compile, a C++ compiler on CPU) on the first request that asks for
    logprobs: 7 s or more on an empty cache, during which the engine makes no step — past these models' 3-s stall
    timeout, so the monitor used to restart the engine under the request (and throw the kernel away). The backend
    now serves a warm-up request with logprobs at load; it is not counted as traffic."""
    families = snapshot(explicit_server)  # before anything asked these models for anything
    for model in EXPLICIT_STARTUP:
        assert value(families, names.VLLM_REQUEST_SUCCESS, model=model) == 0
        assert value(families, names.VLLM_PROMPT_TOKENS, model=model) == 0
        # the monitor's families are published with the rest before READY, not up to a publish interval after
        healthy = series(families, names.ENGINE_HEALTHY, model=model)
        assert [s.value for s in healthy] == ([1] if EXPLICIT_MODELS[model].get("ENABLE_VLLM_HEALTH_CHECK") else []), (
            model, healthy)
    if not gpu_present():  # on CPU inductor builds it with a C++ compiler into this cache (not so on a GPU)
        assert any(cold_compile_cache.iterdir()), "the server's engines compiled nothing into the empty cache"
    assert explicit_server.log_text().count("engine warm-up: one request with logprobs served in") == len(
        EXPLICIT_STARTUP)

    status, body = generate(explicit_server, "h_restart", {"text_input": "Hi", "return_logprobs": True, "parameters": {
        "max_tokens": 4, "ignore_eos": True, "logprobs": 2}})
    assert status == 200, body
    assert len(json.loads(body["logprobs"])) == 4
    families = snapshot(explicit_server)
    assert value(families, names.ENGINE_RESTARTS, model="h_restart") == 0
    assert value(families, names.ENGINE_HEALTHY, model="h_restart") == 1
    assert value(families, names.VLLM_REQUEST_SUCCESS, model="h_restart") == 1


# -- the faults ----------------------------------------------------------------------------------------
def test_sigkill_enginecore_under_load_with_restart(explicit_server, tmp_path):
    """Also: the generated VllmEngineUnhealthy rule (test-only short `for`), loaded by a real Prometheus scraping this
    server, fires while the engine is being replaced; and once it is replaced, VllmEngineCrashLoop (its threshold
    lowered to one restart) pages, though the engine is healthy again."""
    model = "h_restart"
    assert metric(explicit_server, names.ENGINE_HEALTHY, model) == 1
    ipc = ipc_directory(stub_of(explicit_server, model))
    first_engine = {p.parent.name for p in ipc_sockets(ipc)}
    rules = generated_rules(tmp_path, group_thresholds=(
        engine_health.Thresholds(unhealthy_for="1s", crash_loop_restarts=1),))
    with Prometheus(tmp_path, [f"127.0.0.1:{explicit_server.metrics_port}"], [rules]) as prometheus:
        prometheus.wait_for_scrapes(3)
        assert not [a for a in prometheus.alerts() if a["labels"]["alertname"] == "VllmEngineUnhealthy"]
        streams = start_load(explicit_server, model)
        core, _ = engine_processes(explicit_server, model)
        killed = time.monotonic()
        os.kill(core, signal.SIGKILL)
        for message in errors_after(streams, killed, within=DEATH_BOUND_S):
            assert "unavailable" in message.lower() or "dead" in message.lower(), message
        wait_until(lambda: metric(explicit_server, names.ENGINE_HEALTHY, model) == 0, timeout=5)
        assert metric(explicit_server, names.ENGINE_HEALTH_STATE, model, state="unhealthy") == 1
        status, body = generate(explicit_server, model, {"text_input": "Hi", "parameters": {"max_tokens": 2}})
        assert status in (400, 503) and "is unavailable" in body["error"], (status, body)

        def firing(alert: str) -> bool:
            return any(a["labels"]["alertname"] == alert and a["labels"].get("model") == model
                       and a["state"] == "firing" for a in prometheus.alerts())

        wait_until(lambda: firing("VllmEngineUnhealthy"), timeout=30, interval=0.5)  # a new engine takes longer
        assert not firing("VllmEngineCrashLoop")
        # restart: a new engine in place, without an operator
        wait_until(lambda: metric(explicit_server, names.ENGINE_HEALTHY, model) == 1, timeout=240, interval=1)
        assert metric(explicit_server, names.ENGINE_RESTARTS, model) == 1
        wait_until(lambda: firing("VllmEngineCrashLoop"), timeout=30, interval=0.5)
    assert model_ready(explicit_server, model)
    ttft = f"{names.VLLM_TTFT}_count"
    before = value(snapshot(explicit_server), ttft, model=model)
    assert before >= 1  # the first engine's requests
    status, body = generate(explicit_server, model, {"text_input": "Hi", "parameters": {"max_tokens": 2}})
    assert status == 200, body
    assert "engine restarted in place" in explicit_server.log_text()
    # the killed engine's IPC sockets went with it; the new engine's are in a directory of their own
    engines = {p.parent.name for p in ipc_sockets(ipc)}
    assert len(first_engine) == 1 and len(engines) == 1 and engines != first_engine, (first_engine, engines)
    assert [p.name for p in ipc.iterdir()] == list(engines)
    # the new engine's histograms start at 0; Triton's histogram goes on from the old engine's counts
    wait_until(lambda: value(scrape(explicit_server), ttft, model=model) == before + 1, timeout=10)


def test_a_long_engine_step_is_no_hang(explicit_server):
    """A step of seconds (a large model's prefill on CPU, a kernel being compiled), played by stopping the worker for
    4 s under load: the probes (1-s timeout, two failures would do) wait behind it, the model degrades, yet no request
    fails and nothing unloads; what bounds a step is the stall timeout (10 s on this model)."""
    model = "h_unload"
    streams = start_load(explicit_server, model)
    _, worker = engine_processes(explicit_server, model)
    os.kill(worker, signal.SIGSTOP)
    try:
        wait_until(lambda: "engine probe waited behind a long engine step" in explicit_server.log_text(), timeout=4)
        time.sleep(4 - float(FAST_HEALTH["HEALTH_PROBE_TIMEOUT_S"]))
    finally:
        os.kill(worker, signal.SIGCONT)
        resumed = time.monotonic()
    for s in streams:
        s.join(120)
        assert s.error is None, s.error
        assert s.events[-1][0] > resumed and len(s.events) > 100, s.events[-1:]  # it ran on to the end
    wait_until(lambda: metric(explicit_server, names.ENGINE_HEALTHY, model) == 1, timeout=10)
    assert model_ready(explicit_server, model) and metric(explicit_server, names.ENGINE_RESTARTS, model) == 0


def test_sigkill_worker_under_load_with_unload(explicit_server):
    model = "h_unload"
    streams = start_load(explicit_server, model)
    _, worker = engine_processes(explicit_server, model)
    killed = time.monotonic()
    os.kill(worker, signal.SIGKILL)
    errors_after(streams, killed, within=DEATH_BOUND_S)
    wait_until(lambda: not model_ready(explicit_server, model), timeout=30)
    status, _ = generate(explicit_server, model, {"text_input": "Hi", "parameters": {"max_tokens": 2}})
    assert status >= 400


def test_sigstop_enginecore_is_detected_and_sigcont_recovers_under_fail(explicit_server):
    model = "h_fail"
    streams = start_load(explicit_server, model)
    core, _ = engine_processes(explicit_server, model)
    stopped = time.monotonic()
    os.kill(core, signal.SIGSTOP)
    try:
        bound = float(FAST_HEALTH["HEALTH_STALL_TIMEOUT_S"]) + float(FAST_HEALTH["HEALTH_CHECK_INTERVAL_S"]) + 1.0
        for message in errors_after(streams, stopped, within=bound):  # the official sentence first
            assert message.startswith(f"{UNHEALTHY_ANSWER} (model {model} is unavailable"), message
        wait_until(lambda: metric(explicit_server, names.ENGINE_HEALTHY, model) == 0, timeout=3)
        started = time.monotonic()
        status, body = generate(explicit_server, model, {"text_input": "Hi", "parameters": {"max_tokens": 2}})
        assert status >= 400 and "is unavailable" in body["error"] and time.monotonic() - started < 1.0
        assert model_ready(explicit_server, model)  # `fail` keeps the model loaded
    finally:
        os.kill(core, signal.SIGCONT)
    # SIGCONT: the engine resumes; a real one-token generation proves it and the model serves again.
    wait_until(lambda: metric(explicit_server, names.ENGINE_HEALTHY, model) == 1, timeout=60, interval=0.5)
    status, body = generate(explicit_server, model, {"text_input": "Hi", "parameters": {"max_tokens": 2}})
    assert status == 200, body
    assert "engine health: healthy — the engine generates again" in explicit_server.log_text()
    # the failed streams were aborted; the monitor's own one-token checks are no client's requests
    assert value(snapshot(explicit_server), names.VLLM_REQUEST_SUCCESS, model=model) == 1


def test_a_wedged_stub_goes_stale_and_pages_as_stalled(explicit_server, tmp_path):
    """SIGSTOP the model's Python stub: Triton keeps exporting its last values, healthy 1 included, but the
    published progress timestamp stops, so Prometheus's age grows and VllmEngineStalled (120 s shortened to 3 s)
    fires for that model only. An age computed inside the stub would have stayed frozen at a healthy value."""
    model = "h_fail"
    stub = stub_of(explicit_server, model)

    def age() -> float:
        return time.time() - metric(explicit_server, names.ENGINE_LAST_PROGRESS_TIMESTAMP, model)

    assert age() < 3  # idle and watched: the timestamp keeps up
    rules = generated_rules(tmp_path, group_thresholds=(engine_health.Thresholds(stall_seconds=3.0, stall_for="1s"),))
    with Prometheus(tmp_path, [f"127.0.0.1:{explicit_server.metrics_port}"], [rules]) as prometheus:
        prometheus.wait_for_scrapes(3)

        def stalled() -> list[dict]:
            return [a for a in prometheus.alerts() if a["labels"]["alertname"] == "VllmEngineStalled"]

        assert stalled() == []
        stub.suspend()
        try:
            wait_until(lambda: any(a["state"] == "firing" for a in stalled()), timeout=30, interval=0.5)
            assert {a["labels"]["model"] for a in stalled()} == {model}
            assert metric(explicit_server, names.ENGINE_HEALTHY, model) == 1 and age() > 3  # frozen, but stale
        finally:
            stub.resume()
    wait_until(lambda: age() < 3, timeout=30, interval=0.5)
    status, body = generate(explicit_server, model, {"text_input": "Hi", "parameters": {"max_tokens": 2}})
    assert status == 200, body


def test_monitor_off_keeps_the_official_behaviour_and_the_error_ratio_sees_it(explicit_server, tmp_path):
    """Also: requests failed by a dead engine make the dashboards' error ratio > 0 in a real Prometheus, and the
    generated VllmHighErrorRatio (critical `for` 1 s, minimum traffic 1 request) fires for this model. Triton
    counts these error responses as successes; the ratio comes from the backend's outcomes."""
    model = "h_off"
    assert names.ENGINE_HEALTHY not in {
        s.name for f in scrape(explicit_server).values() for s in f.samples if s.labels.get("model") == model}
    rules = generated_rules(tmp_path, min_requests=1,  # a handful of requests here
                            group_thresholds=(errors.Thresholds(error_ratio_critical_for="1s"),))
    with Prometheus(tmp_path, [f"127.0.0.1:{explicit_server.metrics_port}"], [rules]) as prometheus:
        prometheus.wait_for_scrapes(3)
        triton_failures = metric(explicit_server, names.TRITON_FAILURE, model)
        streams = start_load(explicit_server, model)
        core, _ = engine_processes(explicit_server, model)
        killed = time.monotonic()
        os.kill(core, signal.SIGKILL)
        for message in errors_after(streams, killed, within=DEATH_BOUND_S):
            assert "engine is dead" in message, message
        assert model_ready(explicit_server, model)  # nothing unloads it, as with the official backend
        status, body = generate(explicit_server, model, {"text_input": "Hi", "parameters": {"max_tokens": 2}})
        assert status >= 400 and "dead" in body["error"], body
        assert metric(explicit_server, names.TRITON_FAILURE, model) == triton_failures  # Triton saw no failure

        def ratio() -> float:
            found = prometheus.query(error_ratio(f'job="triton", {names.MODEL}="{model}"', window="1m"))
            return float(found[0]["value"][1]) if found else 0.0

        def firing() -> bool:
            return any(a["labels"]["alertname"] == "VllmHighErrorRatio" and a["labels"].get("model") == model
                       and a["labels"]["severity"] == "critical" and a["state"] == "firing"
                       for a in prometheus.alerts())

        wait_until(lambda: ratio() > 0, timeout=20, interval=0.5)
        wait_until(firing, timeout=30, interval=0.5)


def test_a_busy_machine_is_not_a_hung_engine_and_a_stopped_one_is(explicit_server, record_property):
    """With the monitor's defaults, an idle engine stays healthy while two other engines start on the same two
    cores (its probes may be late: its threads wait for a CPU, which a hung engine's do not); then its EngineCore,
    stopped with SIGSTOP, is unhealthy within two probe periods (docs/health.md)."""
    model = "h_default"
    # room for three more engines in memory beside the others on this machine (no later test uses h_off)
    assert repository(explicit_server, "unload", "h_off").status_code == 200
    assert repository(explicit_server, "load", model).status_code == 200
    states: set[str] = set()

    def watch() -> None:
        families = scrape(explicit_server)
        states.update(s for s in ("healthy", "degraded", "unhealthy")
                      if value(families, names.ENGINE_HEALTH_STATE, model=model, state=s) == 1)

    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        loads = [pool.submit(repository, explicit_server, "load", m) for m in ("busy_a", "busy_b")]
        while not all(f.done() for f in loads):
            watch()
            time.sleep(0.5)
    loaded = time.monotonic() - started
    assert all(f.result().status_code == 200 for f in loads), [f.result().text for f in loads]
    watch()
    assert "unhealthy" not in states, states
    assert metric(explicit_server, names.ENGINE_PROBE_FAILURES, model) == 0
    for busy in ("busy_a", "busy_b"):
        assert repository(explicit_server, "unload", busy).status_code == 200
    record_property("report", f"busy machine: two engines loaded beside an idle one in {loaded:.0f} s; its health "
                              f"states meanwhile: {sorted(states)}")

    core, _ = engine_processes(explicit_server, model)
    stopped = time.monotonic()
    os.kill(core, signal.SIGSTOP)
    try:
        # a probe starts within HEALTH_CHECK_INTERVAL_S (5 s) and fails after HEALTH_PROBE_TIMEOUT_S (5 s); twice
        wait_until(lambda: metric(explicit_server, names.ENGINE_HEALTHY, model) == 0, timeout=40, interval=0.25)
        detected = time.monotonic() - stopped
        assert detected <= 2 * (5 + 5) + 5, detected  # ticks and scrapes on two busy cores: 5 s of slack
        assert "the engine's threads neither ran nor waited for a CPU meanwhile" in explicit_server.log_text()
    finally:
        os.kill(core, signal.SIGCONT)
    record_property("report", f"an idle engine stopped with SIGSTOP: unhealthy after {detected:.1f} s (two probe "
                              "periods: 20 s)")
    wait_until(lambda: metric(explicit_server, names.ENGINE_HEALTHY, model) == 1, timeout=60, interval=0.5)
    assert repository(explicit_server, "unload", model).status_code == 200
