"""Real faults on real engines: SIGKILL and SIGSTOP the EngineCore or the worker under streaming load.

One server in explicit model-control mode (needed by HEALTH_RECOVERY=unload) with a model per policy, and
short timeouts so that each fault resolves in seconds.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest
import requests
from helpers import engine_of, explicit_mode_server, generate, scrape, stub_of, value, wait_until

from vllm_triton_observable.metrics import names

FAST = {"ENABLE_VLLM_HEALTH_CHECK": "true", "REPORT_CUSTOM_METRICS": "true", "HEALTH_CHECK_INTERVAL_S": "0.5",
        "HEALTH_PROBE_TIMEOUT_S": "1", "HEALTH_STALL_TIMEOUT_S": "3", "HEALTH_RESTART_BACKOFF_S": "0.5",
        "HEALTH_RESTART_MAX_ATTEMPTS": "2"}
MODELS = {
    "h_restart": {**FAST, "HEALTH_RECOVERY": "restart"},
    "h_unload": {**FAST, "HEALTH_RECOVERY": "unload"},
    "h_fail": {**FAST, "HEALTH_RECOVERY": "fail"},
    "h_off": {"REPORT_CUSTOM_METRICS": "true"},
}
LONG = {"stream": True, "max_tokens": 1000, "ignore_eos": True}


@pytest.fixture(scope="module")
def health_server(tmp_path_factory):
    with explicit_mode_server(tmp_path_factory.mktemp("health_repository"), MODELS) as triton:
        yield triton


# -- processes -------------------------------------------------------------------------------------
def engine_processes(server, model: str) -> tuple[int, int]:
    """(EngineCore pid, Worker pid) of a model's engine."""
    core, worker = engine_of(stub_of(server, model))
    return core.pid, worker.pid


# -- load --------------------------------------------------------------------------------------------
class Stream(threading.Thread):
    """One streaming request in the background, recording when each event arrived."""

    def __init__(self, server, model: str) -> None:
        super().__init__(daemon=True)
        self.server, self.model = server, model
        self.events: list[tuple[float, dict]] = []

    def run(self) -> None:
        url = f"{self.server.http_url}/v2/models/{self.model}/generate_stream"
        with requests.post(url, json={"text_input": "load", "parameters": LONG}, stream=True, timeout=120) as r:
            for line in r.iter_lines():
                if line.startswith(b"data: "):
                    self.events.append((time.monotonic(), json.loads(line[6:])))

    @property
    def error(self) -> tuple[float, str] | None:
        return next(((t, e["error"]) for t, e in self.events if "error" in e), None)


def start_load(server, model: str, n: int = 3) -> list[Stream]:
    streams = [Stream(server, model) for _ in range(n)]
    for s in streams:
        s.start()
    wait_until(lambda: all(len(s.events) >= 2 for s in streams), timeout=60)
    return streams


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


# -- the faults ----------------------------------------------------------------------------------------
def test_sigkill_enginecore_under_load_with_restart(health_server):
    model = "h_restart"
    assert metric(health_server, names.ENGINE_HEALTHY, model) == 1
    streams = start_load(health_server, model)
    core, _ = engine_processes(health_server, model)
    killed = time.monotonic()
    os.kill(core, signal.SIGKILL)
    for message in errors_after(streams, killed, within=1.0):
        assert "unavailable" in message.lower() or "dead" in message.lower(), message
    wait_until(lambda: metric(health_server, names.ENGINE_HEALTHY, model) == 0, timeout=5)
    assert metric(health_server, names.ENGINE_HEALTH_STATE, model, state="unhealthy") == 1
    status, body = generate(health_server, model, {"text_input": "Hi", "parameters": {"max_tokens": 2}})
    assert status in (400, 503) and "is unavailable" in body["error"], (status, body)
    # restart: a new engine in place, without an operator
    wait_until(lambda: metric(health_server, names.ENGINE_HEALTHY, model) == 1, timeout=240, interval=1)
    assert metric(health_server, names.ENGINE_RESTARTS, model) == 1
    assert model_ready(health_server, model)
    status, body = generate(health_server, model, {"text_input": "Hi", "parameters": {"max_tokens": 2}})
    assert status == 200, body
    assert "engine restarted in place" in health_server.log_text()


def test_sigkill_worker_under_load_with_unload(health_server):
    model = "h_unload"
    streams = start_load(health_server, model)
    _, worker = engine_processes(health_server, model)
    killed = time.monotonic()
    os.kill(worker, signal.SIGKILL)
    errors_after(streams, killed, within=1.0)
    wait_until(lambda: not model_ready(health_server, model), timeout=30)
    status, _ = generate(health_server, model, {"text_input": "Hi", "parameters": {"max_tokens": 2}})
    assert status >= 400


def test_sigstop_enginecore_is_detected_and_sigcont_recovers_under_fail(health_server):
    model = "h_fail"
    streams = start_load(health_server, model)
    core, _ = engine_processes(health_server, model)
    stopped = time.monotonic()
    os.kill(core, signal.SIGSTOP)
    try:
        bound = float(FAST["HEALTH_STALL_TIMEOUT_S"]) + float(FAST["HEALTH_CHECK_INTERVAL_S"]) + 1.0
        for message in errors_after(streams, stopped, within=bound):
            assert f"model {model} is unavailable" in message, message
        wait_until(lambda: metric(health_server, names.ENGINE_HEALTHY, model) == 0, timeout=3)
        started = time.monotonic()
        status, body = generate(health_server, model, {"text_input": "Hi", "parameters": {"max_tokens": 2}})
        assert status >= 400 and "is unavailable" in body["error"] and time.monotonic() - started < 1.0
        assert model_ready(health_server, model)  # `fail` keeps the model loaded
    finally:
        os.kill(core, signal.SIGCONT)
    # SIGCONT: the engine resumes; a real one-token generation proves it and the model serves again.
    wait_until(lambda: metric(health_server, names.ENGINE_HEALTHY, model) == 1, timeout=60, interval=0.5)
    status, body = generate(health_server, model, {"text_input": "Hi", "parameters": {"max_tokens": 2}})
    assert status == 200, body
    assert "engine health: healthy — the engine generates again" in health_server.log_text()


def test_monitor_off_keeps_the_official_behaviour(health_server):
    model = "h_off"
    assert names.ENGINE_HEALTHY not in {
        s.name for f in scrape(health_server).values() for s in f.samples if s.labels.get("model") == model}
    streams = start_load(health_server, model)
    core, _ = engine_processes(health_server, model)
    killed = time.monotonic()
    os.kill(core, signal.SIGKILL)
    for message in errors_after(streams, killed, within=1.0):
        assert "engine is dead" in message, message
    assert model_ready(health_server, model)  # nothing unloads it, as with the official backend
    status, body = generate(health_server, model, {"text_input": "Hi", "parameters": {"max_tokens": 2}})
    assert status >= 400 and "dead" in body["error"], body


def test_engine_unhealthy_alert_fires_in_a_real_prometheus(health_server, tmp_path):
    """The generated rules (test-only short `for`) loaded by a real Prometheus scraping this server."""
    import dataclasses

    import yaml
    from helpers import ROOT
    from prometheus_server import Prometheus

    from alerts.definitions import panel_ids
    from alerts.render import prometheus_groups
    from observability.config import DEFAULT

    config = dataclasses.replace(DEFAULT, unhealthy_for="1s")
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(prometheus_groups(config, panel_ids(ROOT / "dashboards" / "generated"))))
    model = "h_restart"
    wait_until(lambda: metric(health_server, names.ENGINE_HEALTHY, model) == 1, timeout=240, interval=1)
    with Prometheus(tmp_path, [f"127.0.0.1:{health_server.metrics_port}"], [rules]) as prometheus:
        prometheus.wait_for_scrapes(3)
        assert not [a for a in prometheus.alerts() if a["labels"]["alertname"] == "VllmEngineUnhealthy"]
        core, _ = engine_processes(health_server, model)
        os.kill(core, signal.SIGKILL)

        def firing() -> bool:
            return any(a["labels"]["alertname"] == "VllmEngineUnhealthy" and a["labels"].get("model") == model
                       and a["state"] == "firing" for a in prometheus.alerts())

        wait_until(firing, timeout=30, interval=0.5)
    # leave the model healthy again (restart) for whoever comes next
    wait_until(lambda: metric(health_server, names.ENGINE_HEALTHY, model) == 1, timeout=240, interval=1)
