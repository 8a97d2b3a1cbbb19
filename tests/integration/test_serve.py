"""`make serve`'s launcher on the sample repository: ready, answers the README's curl, stops without leftovers
and within the server's exit timeout, however long the generations running at Ctrl-C would take."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import threading
import time

import psutil
import pytest
from helpers import (
    grpc_inputs,
    grpc_stream,
    launched,
    leaked,
    printed_commands,
    run_command,
    sse_events,
    wait_until,
)
from triton_launcher import shm_in_use

# tritonserver waits this long for its models at exit; the backend keeps 20 s of it for vLLM's shutdown, so
# running requests may finish for 2 s (UNLOAD_DRAIN_TIMEOUT_S is the sample's default, 30 s).
EXIT_TIMEOUT_S = 22


def mapped_by(pid: int) -> set[str]:
    """What the server and its children have mapped under /dev/shm (the other test worker's servers, and the
    engines its fault tests kill, have entries of their own there)."""
    root = psutil.Process(pid)
    return shm_in_use([root, *root.children(recursive=True)])


@pytest.fixture(scope="module")
def served():
    with launched(triton_args=f"--exit-timeout-secs={EXIT_TIMEOUT_S}") as served:
        yield served


def test_the_printed_curl_commands_return_generated_text(served):
    commands = printed_commands(served.output)
    assert len(commands) == 2, commands  # vllm_model: generate and generate_stream
    answer = json.loads(run_command(commands[0]))
    assert answer["model_name"] == "vllm_model" and len(answer["text_output"]) > len("What is Triton?")
    events = sse_events(run_command(commands[1]))
    assert len(events) > 1 and all("text_output" in e for e in events)


def long_streams(endpoint, n: int) -> tuple[list[list], list[list], threading.Thread]:
    """n gRPC streams of 1000 tokens (several seconds together) in a thread of their own: the responses as they
    arrive, and each stream's (result, error) pairs once it ended."""
    arrived: list[list] = [[] for _ in range(n)]
    ended: list[list] = []
    inputs = grpc_inputs("at exit", sampling={"max_tokens": 1000, "ignore_eos": True}, return_num_output_tokens=True)

    async def all_streams() -> None:
        ended.extend(await asyncio.gather(*(grpc_stream(endpoint, "vllm_model", inputs, on_response=arrived[i].append)
                                            for i in range(n))))

    thread = threading.Thread(target=asyncio.run, args=(all_streams(),), daemon=True)
    thread.start()
    return arrived, ended, thread


def test_ctrl_c_bounds_running_generations_and_leaves_no_process_and_no_shared_memory(served):
    endpoint, process, pid, output, log_path = (served.endpoint, served.process, served.pid, served.output,
                                                served.log_path)
    printed = "".join(output)
    assert "curl -s -X POST" in printed and "/generate_stream" in printed  # the examples were printed
    ours = mapped_by(pid)
    assert any(name.startswith("triton_") for name in ours), ours  # the stub's region, at least
    arrived, ended, streams = long_streams(endpoint, 8)
    wait_until(lambda: all(len(r) >= 2 for r in arrived), timeout=60)
    began = time.monotonic()
    process.send_signal(signal.SIGINT)
    process.wait(120)
    stopped_after = time.monotonic() - began
    streams.join(30)
    said = process.stdout.read()
    log = log_path.read_text()
    # Without the backend's bound the server would wait for every generation; it noticed the exit instead
    # (tritonserver closes its HTTP endpoint at once), stopped what outlived 2 s and shut the engine down.
    assert "tritonserver is exiting (its HTTP endpoint closed): running requests of vllm_model may finish for up " \
           "to 2 s" in log, log[-3000:]
    assert "unload" in log.split("tritonserver is exiting", 1)[1]  # the engine shut down after it
    generated = sum(int(result.as_numpy("num_output_tokens")[0]) for r in arrived for result in r)
    assert generated < 8 * 1000, generated  # what outlived the bound was stopped, and its client told why:
    errors = [str(error) for pairs in ended for _, error in pairs if error is not None]
    assert errors and all("did not finish within 2 s (UNLOAD_DRAIN_TIMEOUT_S)" in e for e in errors), errors
    assert stopped_after < EXIT_TIMEOUT_S, stopped_after
    assert "stopped cleanly" in said, said  # the launcher had nothing to kill or unlink after the backend
    with pytest.raises(ProcessLookupError):  # no process of the server's process group is left
        os.killpg(pid, 0)
    assert leaked(ours) == set()
