"""`make serve`'s launcher on the sample repository: ready, answers the README's curl, stops without leftovers."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from helpers import ROOT, generate, generate_stream
from triton_launcher import SHM_GLOBS, free_port, shm_in_use


def shm_names() -> set[str]:
    return {p.name for pattern in SHM_GLOBS for p in Path("/dev/shm").glob(pattern)}


def mapped_by(pid: int) -> set[str]:
    """What the server and its children have mapped under /dev/shm (the other test worker's servers, and the
    engines its fault tests kill, have entries of their own there)."""
    root = psutil.Process(pid)
    return shm_in_use([root, *root.children(recursive=True)])


def leaked(ours: set[str]) -> set[str]:
    """Of the server's entries, those still there once no process uses them (an ending process's semaphores are
    unlinked by its resource tracker a moment after it exits)."""
    deadline = time.monotonic() + 10
    while (left := (ours & shm_names()) - shm_in_use()) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


class Endpoint:
    def __init__(self, http_port: int) -> None:
        self.http_url = f"http://127.0.0.1:{http_port}"


@pytest.fixture(scope="module")
def served():
    ports = [free_port() for _ in range(3)]
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "triton_launcher.py"), "--http-port", str(ports[0]),
         "--grpc-port", str(ports[1]), "--metrics-port", str(ports[2])],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(os.environ), start_new_session=True)
    output: list[str] = []
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:  # through the printed examples, which end with the Ctrl-C hint
        line = process.stdout.readline()
        output.append(line)
        if "Ctrl-C stops the server" in line or not line:
            break
    assert "ready. Try:" in "".join(output), "".join(output)
    pid = int(re.search(r"tritonserver pid (\d+)", "".join(output)).group(1))
    yield Endpoint(ports[0]), process, pid, output
    if process.poll() is None:  # a failed test must not leave the server running
        process.send_signal(signal.SIGINT)
        process.wait(120)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_the_readme_curl_returns_generated_text(served):
    endpoint, *_ = served
    status, body = generate(endpoint, "vllm_model", {"text_input": "What is Triton?",
                                                     "parameters": {"stream": False, "max_tokens": 16}})
    assert status == 200 and len(body["text_output"]) > len("What is Triton?")
    events = generate_stream(endpoint, "vllm_model", {"text_input": "What is Triton?",
                                                      "parameters": {"stream": True, "max_tokens": 16}})
    assert len(events) > 1 and all("text_output" in e for e in events)


def test_ctrl_c_leaves_no_process_and_no_shared_memory(served):
    _, process, pid, output = served
    printed = "".join(output)
    assert "curl -s -X POST" in printed and "/generate_stream" in printed  # the examples were printed
    ours = mapped_by(pid)
    assert any(name.startswith("triton_") for name in ours), ours  # the stub's region, at least
    process.send_signal(signal.SIGINT)
    process.wait(120)
    said = process.stdout.read()
    assert "stopped cleanly" in said, said  # the launcher had nothing to kill or unlink after the backend
    with pytest.raises(ProcessLookupError):  # no process of the server's process group is left
        os.killpg(pid, 0)
    assert leaked(ours) == set()
