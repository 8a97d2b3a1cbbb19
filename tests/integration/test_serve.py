"""`make serve`'s launcher on the sample repository: ready, answers the README's curl, stops without leftovers."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import psutil
import pytest
from helpers import launched, printed_commands, run_command, sse_events
from triton_launcher import SHM_GLOBS, shm_in_use


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


@pytest.fixture(scope="module")
def served():
    with launched() as served:
        yield served.endpoint, served.process, served.pid, served.output


def test_the_printed_curl_commands_return_generated_text(served):
    *_, output = served
    commands = printed_commands(output)
    assert len(commands) == 2, commands  # vllm_model: generate and generate_stream
    answer = json.loads(run_command(commands[0]))
    assert answer["model_name"] == "vllm_model" and len(answer["text_output"]) > len("What is Triton?")
    events = sse_events(run_command(commands[1]))
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
