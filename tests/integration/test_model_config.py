"""Model configuration errors fail the load with a message naming the cause; nothing hangs.

One server holds every broken model (Triton keeps serving the good one with --exit-on-error=false) and runs
with --allow-metrics=false, which must not stop a model with REPORT_CUSTOM_METRICS "true" from loading.
"""

from __future__ import annotations

import os
import threading
import time

import psutil
import pytest
import requests
from helpers import (
    BASE_ENGINE,
    backends_with_vllm_plugin,
    cmdline,
    generate,
    ipc_directory,
    leaked,
    server_env,
    wait_until,
    write_model,
)
from triton_launcher import TritonServer, shm_in_use

BROKEN = {
    "unknown_key": ({**BASE_ENGINE, "max_model_lenght": 512},
                    "unknown engine argument 'max_model_lenght'"),
    "wrong_type": ({**BASE_ENGINE, "max_model_len": "long"}, "engine argument 'max_model_len' has the wrong type"),
    "not_json": ("{\"model\": ", "model.json: not valid JSON"),
    "engine_fails": ({**BASE_ENGINE, "max_model_len": 999999}, "the vLLM engine failed to start"),
    "missing_weights": ({**BASE_ENGINE, "model": "/nonexistent/model"}, "invalid engine arguments: Repo id must be"),
    "lora_without_file": ({**BASE_ENGINE, "enable_lora": True}, "multi_lora.json does not exist"),
}


@pytest.fixture(scope="module")
def config_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("broken_repository")
    write_model(repo, "good", params={"REPORT_CUSTOM_METRICS": "true"})
    for name, (engine, _) in BROKEN.items():
        write_model(repo, name, engine)
    write_model(repo, "bad_switch", params={"REPORT_CUSTOM_METRICS": "ture"})
    write_model(repo, "unknown_param", params={"ENABLE_VLLM_HEALTH_CHECK": "true", "HEALTH_CHECK_INTERVAL": "1"})
    write_model(repo, "contradiction", params={"ENABLE_VLLM_HEALTH_CHECK": "true", "HEALTH_DEGRADED_PROBE_S": "9"})
    write_model(repo, "unload_not_explicit", params={"ENABLE_VLLM_HEALTH_CHECK": "true", "HEALTH_RECOVERY": "unload"})
    write_model(repo, "slow_start", params={"ENGINE_START_TIMEOUT_S": "2"})  # no engine starts in 2 s here
    write_model(repo, "too_many_response_threads", params={"RESPONSE_THREADS": "64"})
    write_model(repo, "too_long_switch_interval", params={"GIL_SWITCH_INTERVAL_MS": "200"})
    with TritonServer(repo, env=server_env(),
                      extra_args=["--exit-on-error=false", "--allow-metrics=false"]) as triton:
        triton.wait_ready(timeout=600, models=["good"])
        yield triton


def index(server) -> dict[str, dict]:
    answer = requests.post(f"{server.http_url}/v2/repository/index", json={}, timeout=10).json()
    return {entry["name"]: entry for entry in answer}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_model_fails_to_load_with_its_cause(config_server, name):
    entry = index(config_server)[name]
    assert entry["state"] == "UNAVAILABLE"
    assert BROKEN[name][1] in entry["reason"], entry["reason"]


def test_the_engine_failure_carries_vllms_reason(config_server):
    assert "max_model_len" in index(config_server)["engine_fails"]["reason"]


def test_a_typo_in_a_switch_fails_the_load(config_server):
    assert "REPORT_CUSTOM_METRICS: 'ture' is not a boolean" in index(config_server)["bad_switch"]["reason"]


def test_an_unknown_key_fails_the_load_with_a_suggestion(config_server):
    reason = index(config_server)["unknown_param"]["reason"]
    assert ("config.pbtxt parameter HEALTH_CHECK_INTERVAL: unknown to the vllm backend; did you mean "
            "HEALTH_CHECK_INTERVAL_S?") in reason, reason


def test_a_response_thread_count_out_of_bounds_fails_the_load(config_server):
    reason = index(config_server)["too_many_response_threads"]["reason"]
    assert "config.pbtxt parameter RESPONSE_THREADS must be at most 32 (got 64)" in reason, reason


def test_a_gil_switch_interval_out_of_bounds_fails_the_load(config_server):
    reason = index(config_server)["too_long_switch_interval"]["reason"]
    assert "config.pbtxt parameter GIL_SWITCH_INTERVAL_MS must be at most 100 (got 200)" in reason, reason


def test_contradictory_health_settings_fail_the_load(config_server):
    reason = index(config_server)["contradiction"]["reason"]
    assert "HEALTH_DEGRADED_PROBE_S (9) must be less than HEALTH_PROBE_TIMEOUT_S (5)" in reason, reason


def test_unload_recovery_is_refused_outside_explicit_mode(config_server):
    reason = index(config_server)["unload_not_explicit"]["reason"]
    assert "HEALTH_RECOVERY=unload needs tritonserver --model-control-mode=explicit" in reason


def test_metrics_disabled_on_the_server_still_loads_and_says_so(config_server):
    status, body = generate(config_server, "good", {"text_input": "Hi", "parameters": {"max_tokens": 2}})
    assert status == 200, body
    assert "metrics: off for good (tritonserver runs with --allow-metrics=false)" in config_server.log_text()
    with pytest.raises(requests.ConnectionError):
        requests.get(config_server.metrics_url, timeout=5)


def test_an_engine_that_does_not_start_in_time_fails_the_load_and_leaves_no_process(config_server):
    """ENGINE_START_TIMEOUT_S bounds a start at any step (vLLM's processes, the warm-up): the load fails with the
    cause, and the engine that was still starting does not outlive it."""
    reason = index(config_server)["slow_start"]["reason"]
    assert "the vLLM engine did not start within 2 s (ENGINE_START_TIMEOUT_S)" in reason, reason

    def engine_cores() -> int:  # only `good` has an engine now
        return sum("VLLM::EngineCore" in cmdline(p)
                   for p in psutil.Process(config_server.process.pid).children(recursive=True))

    wait_until(lambda: engine_cores() == 1, timeout=90)


# A vLLM general plugin: the health monitor fails to start, after the engine, the metrics and the generation service
# have. vLLM loads it in the stub as it builds the engine arguments (and in the EngineCore, where it changes nothing).
FAILS_AFTER_THE_ENGINE = '''"""The health monitor's start raises: a load that fails half-way."""


def register():
    from vllm_triton_observable.health.monitor import HealthMonitor

    def start(self):
        raise RuntimeError("injected failure after the engine started")

    HealthMonitor.start = start
'''
TEARDOWN_BOUND_S = 30.0


class Observed(threading.Thread):
    """The failing model's stub and what it starts, seen every 0.2 s while it loads: processes, /dev/shm entries,
    the IPC directory."""

    def __init__(self, server: TritonServer, model: str) -> None:
        super().__init__(daemon=True)
        self.server, self.model = server, model
        self.processes: dict[int, psutil.Process] = {}
        self.titles: set[str] = set()  # their command lines, read while they run
        self.shm: set[str] = set()
        self.ipc: set[str] = set()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.2):
            try:
                stubs = [p for p in psutil.Process(self.server.process.pid).children()
                         if f"/{self.model}/1/model.py" in cmdline(p)]
                for stub in stubs:
                    tree = [stub, *stub.children(recursive=True)]
                    self.processes.update({p.pid: p for p in tree})
                    self.titles |= {cmdline(p) for p in tree}
                    self.shm |= shm_in_use(tree)
                    found = ipc_directory(stub)
                    self.ipc |= {str(found)} if found else set()
            except psutil.Error:
                continue


def test_a_load_that_fails_after_the_engine_started_stops_what_it_started(tmp_path):
    """The parts of a load start on one stack: a failure after the engine started (the health monitor's start,
    here) shuts the engine down and stops the metrics before the load reports its failure, and nothing of the
    model — process, shared memory, IPC directory — is left."""
    backends = backends_with_vllm_plugin(tmp_path, "fails_after_the_engine", FAILS_AFTER_THE_ENGINE)
    repo = tmp_path / "repository"
    write_model(repo, "fails_late", params={"REPORT_CUSTOM_METRICS": "true", "ENABLE_VLLM_HEALTH_CHECK": "true"})
    with TritonServer(repo, env={**server_env(), "BACKEND_DIR": str(backends)},
                      extra_args=["--exit-on-error=false"]) as triton:
        observed = Observed(triton, "fails_late")
        observed.start()

        def reason() -> str | None:
            try:
                entry = index(triton).get("fails_late", {})
            except requests.RequestException:
                return None
            return entry.get("reason") if entry.get("state") == "UNAVAILABLE" else None

        wait_until(lambda: reason() is not None, timeout=600)
        failed = time.monotonic()
        observed.done.set()
        observed.join()
        assert "RuntimeError: injected failure after the engine started" in reason()
        log = triton.log_text()
        engine_started = log.index("engine warm-up: one request")
        torn_down = log.index("engine shut down in", engine_started)
        assert torn_down < log.index("[vllm] model load failed: RuntimeError: injected failure"), log[-3000:]
        assert any("VLLM::EngineCore" in title for title in observed.titles), observed.titles  # an engine ran

        def running(process: psutil.Process) -> bool:
            try:
                return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
            except psutil.Error:
                return False

        def left() -> list[str]:
            return sorted({cmdline(p)[:60] for p in observed.processes.values() if running(p)} |
                          {path for path in observed.ipc if os.path.exists(path)})

        wait_until(lambda: not left(), timeout=TEARDOWN_BOUND_S)
        assert not leaked(observed.shm), observed.shm
        print(f"a load failing after its engine started: nothing left {time.monotonic() - failed:.1f} s after the "
              f"failure ({len(observed.processes)} processes, {len(observed.shm)} shm entries seen)")
        assert triton.process.poll() is None
