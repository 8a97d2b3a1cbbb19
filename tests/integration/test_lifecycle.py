"""Unload and reload through Triton's repository API (explicit model-control mode): running generations finish,
nothing leaks (processes, shared memory), and an unload during an engine restart leaves no engine behind."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest
import requests
from helpers import engine_of, explicit_mode_server, generate, stub_of, wait_until

FAST_HEALTH = {"ENABLE_VLLM_HEALTH_CHECK": "true", "HEALTH_CHECK_INTERVAL_S": "0.5", "HEALTH_PROBE_TIMEOUT_S": "1",
               "HEALTH_STALL_TIMEOUT_S": "3", "HEALTH_RESTART_BACKOFF_S": "0.5", "HEALTH_RECOVERY": "restart"}
MODELS = {
    "life": {},
    "other": {},
    "short_drain": {"UNLOAD_DRAIN_TIMEOUT_S": "1"},
    "restarting": FAST_HEALTH,
}


@pytest.fixture(scope="module")
def triton(tmp_path_factory):
    with explicit_mode_server(tmp_path_factory.mktemp("lifecycle_repository"), MODELS) as server:
        yield server


def repository(server, action: str, model: str) -> requests.Response:
    return requests.post(f"{server.http_url}/v2/repository/models/{model}/{action}", timeout=600)


def ready(server, model: str) -> bool:
    return requests.get(f"{server.http_url}/v2/models/{model}/ready", timeout=5).status_code == 200


def tree(process: psutil.Process) -> list[psutil.Process]:
    return [process, *process.children(recursive=True)]


def engine_processes() -> set[int]:
    found = set()
    for p in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(p.info["cmdline"] or [])
        if "VLLM::EngineCore" in cmdline or "VLLM::Worker" in cmdline:
            found.add(p.pid)
    return found


def shm_region(process: psutil.Process) -> str:
    """The stub's shared-memory region (its last argument names it)."""
    return next(a for a in process.cmdline() if "shm_region" in a)


class Stream(threading.Thread):
    def __init__(self, server, model: str, max_tokens: int) -> None:
        super().__init__(daemon=True)
        self.url = f"{server.http_url}/v2/models/{model}/generate_stream"
        self.body = {"text_input": "drain", "return_num_output_tokens": True,
                     "parameters": {"stream": True, "max_tokens": max_tokens, "ignore_eos": True}}
        self.events: list[dict] = []

    def run(self) -> None:
        with requests.post(self.url, json=self.body, stream=True, timeout=120) as response:
            for line in response.iter_lines():
                if line.startswith(b"data: "):
                    self.events.append(json.loads(line[6:]))


def start_streams(server, model: str, n: int, max_tokens: int) -> list[Stream]:
    # the backend follows the model's readiness from Triton's HTTP endpoint, which starts after the startup models
    wait_until(lambda: f"unload watch: following Triton's readiness of {model}\"" in server.log_text(), timeout=30)
    streams = [Stream(server, model, max_tokens) for _ in range(n)]
    for s in streams:
        s.start()
    wait_until(lambda: all(len(s.events) >= 2 for s in streams), timeout=60)
    return streams


def test_unload_lets_running_streams_finish_and_frees_everything(triton):
    process = stub_of(triton, "life")
    processes, region = tree(process), shm_region(process)
    assert len(processes) >= 3  # stub, EngineCore, Worker
    streams = start_streams(triton, "life", n=3, max_tokens=1000)
    assert repository(triton, "unload", "life").status_code == 200
    for s in streams:
        s.join(120)
        assert all("error" not in e for e in s.events), s.events[-1]
        assert sum(e["num_output_tokens"] for e in s.events) == 1000  # every generation ran to its end
    wait_until(lambda: not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in processes), timeout=60)
    assert not ready(triton, "life")
    assert not Path("/dev/shm", region).exists()
    status, body = generate(triton, "other", {"text_input": "still here", "parameters": {"max_tokens": 4}})
    assert status == 200, body
    assert "Triton no longer reports life ready (unload or shutdown)" in triton.log_text()


def test_unload_aborts_what_outlives_the_drain_bound(triton):
    streams = start_streams(triton, "short_drain", n=8, max_tokens=1000)  # together they take several seconds
    started = time.monotonic()
    assert repository(triton, "unload", "short_drain").status_code == 200
    for stream in streams:
        stream.join(60)
    errors = [e["error"] for s in streams for e in s.events if "error" in e]
    assert errors and all("did not finish within 1 s (UNLOAD_DRAIN_TIMEOUT_S)" in e for e in errors), errors
    assert time.monotonic() - started < 30


def test_load_unload_cycles_leak_nothing(triton, capsys):
    server = psutil.Process(triton.process.pid)
    shm_before = set(os.listdir("/dev/shm"))
    children_before = {p.pid for p in server.children(recursive=True)}
    rss = []
    for _ in range(5):
        assert repository(triton, "load", "life").status_code == 200
        status, body = generate(triton, "life", {"text_input": "cycle", "parameters": {"max_tokens": 4}})
        assert status == 200, body
        assert repository(triton, "unload", "life").status_code == 200
        wait_until(lambda: {p.pid for p in server.children(recursive=True)} <= children_before, timeout=60)
        rss.append(server.memory_info().rss)
    assert set(os.listdir("/dev/shm")) - shm_before == set()
    growth = (rss[-1] - rss[0]) / rss[0]
    with capsys.disabled():  # reported in the test output, not asserted: the server's allocator keeps some
        print(f"\ntritonserver RSS after each load/unload cycle (MiB): {[r // 2**20 for r in rss]}; "
              f"growth from the first: {growth:+.1%}")


def test_unload_during_an_engine_restart_leaves_no_engine_behind(triton):
    process = stub_of(triton, "restarting")
    engines_before = engine_processes()
    core, _ = engine_of(process)
    os.kill(core.pid, signal.SIGKILL)
    # the monitor notices, waits its backoff, then builds a new engine (tens of seconds on CPU): unload then
    wait_until(lambda: "restarting the engine in 0.5 s" in triton.log_text(), timeout=30)
    wait_until(lambda: engine_processes() - engines_before, timeout=60, interval=0.2)
    assert repository(triton, "unload", "restarting").status_code == 200
    wait_until(lambda: not process.is_running() or process.status() == psutil.STATUS_ZOMBIE, timeout=180)
    wait_until(lambda: not (engine_processes() - engines_before), timeout=60)
    survivors = engine_processes() & engines_before
    assert core.pid not in survivors
    assert not ready(triton, "restarting")
