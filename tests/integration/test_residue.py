"""No fault leaves residue: SIGKILL of the EngineCore, of the worker, of the stub and of tritonserver, each under
streaming load, twice, on a machine kept busy on purpose (a CPU burner beside the other test worker's servers).
After each, within a bound, every process of that model instance has ended, and every shared-memory segment,
semaphore and IPC socket file it had is gone. The time each took is reported at the end of the test run.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from helpers import (
    BASE_ENGINE,
    cmdline,
    engine_of,
    generate,
    ipc_directory,
    leaked,
    server_env,
    start_load,
    stub_of,
    wait_until,
    write_model,
)
from triton_launcher import OUTLIVE_BOUND_S, TritonServer, shm_in_use

MODEL = "victim"
# Found dead at once (vLLM's process sentinel), a new engine in place after half a second.
PARAMS = {"REPORT_CUSTOM_METRICS": "true", "ENABLE_VLLM_HEALTH_CHECK": "true", "HEALTH_RECOVERY": "restart",
          "HEALTH_RESTART_BACKOFF_S": "0.5", "HEALTH_RESTART_MAX_ATTEMPTS": "3"}
GONE_BOUND_S = OUTLIVE_BOUND_S  # every process ended and everything it had freed, on two busy cores
REPEAT = 2


@pytest.fixture(scope="module")
def busy_machine() -> Iterator[None]:
    """A CPU burner beside the tests, on top of the other test worker's servers. At nice 10 (about a tenth of a
    core against each busy process): the other worker's timed tests run beside it."""
    burner = subprocess.Popen([sys.executable, "-c", "import os; os.nice(10)\nwhile True: pass"])
    yield
    burner.kill()
    burner.wait()


@pytest.fixture(scope="module")
def repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("residue_repository")
    write_model(repo, MODEL, BASE_ENGINE, params=PARAMS)
    return repo


@pytest.fixture(scope="module")
def victim_server(repo, busy_machine) -> Iterator[TritonServer]:
    with TritonServer(repo, env=server_env()) as triton:
        triton.wait_ready(timeout=900)
        yield triton


@dataclass
class Footprint:
    """What one engine (or a whole instance) holds: its processes, /dev/shm entries and IPC socket files."""

    processes: list[psutil.Process]
    shm: set[str]
    sockets: list[Path]

    @classmethod
    def of(cls, processes: list[psutil.Process], ipc: Path | None) -> Footprint:
        sockets = sorted(p for p in ipc.rglob("*") if p.is_socket()) if ipc is not None else []
        return cls(processes, shm_in_use(processes), sockets)

    def gone_within(self, bound_s: float, since: float) -> float:
        """Seconds from `since` until nothing of it is left; fails naming what stayed."""
        def alive(p: psutil.Process) -> bool:
            try:
                return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
            except psutil.Error:
                return False

        deadline = since + bound_s
        while living := [p for p in self.processes if alive(p)]:
            assert time.monotonic() < deadline, f"still running after {bound_s:g} s: " + ", ".join(
                f"{p.pid} {cmdline(p)[:80]}" for p in living)
            time.sleep(0.2)
        left = leaked(self.shm, timeout=max(1.0, bound_s - (time.monotonic() - since)))
        assert not left, f"left behind in /dev/shm: {sorted(left)} of {sorted(self.shm)}"
        wait_until(lambda: not any(s.exists() for s in self.sockets), timeout=5)
        took = time.monotonic() - since
        assert took <= bound_s, f"{took:.1f} s (bound {bound_s} s)"
        return took


def engine_footprint(server: TritonServer) -> Footprint:
    stub = stub_of(server, MODEL)
    core, worker = engine_of(stub)
    return Footprint.of([core, worker], ipc_directory(stub))


def served_again(server: TritonServer) -> None:
    """The instance serves again (after a restart in place, or once Triton has started a new stub)."""
    def answers() -> bool:
        status, _ = generate(server, MODEL, {"text_input": "again", "parameters": {"max_tokens": 2}})
        return status == 200

    wait_until(answers, timeout=300, interval=1.0)


@pytest.mark.parametrize("victim", ["EngineCore", "Worker"])
def test_a_killed_engine_process_leaves_nothing_behind(victim_server, victim, record_property):
    """The restart policy replaces the engine; the killed one's other process, shared memory and IPC sockets go."""
    took = []
    for _ in range(REPEAT):
        streams = start_load(victim_server, MODEL)
        old = engine_footprint(victim_server)
        assert old.sockets, "the engine has no IPC sockets in the instance's directory"
        target = old.processes[0 if victim == "EngineCore" else 1]
        killed = time.monotonic()
        target.send_signal(signal.SIGKILL)
        took.append(old.gone_within(GONE_BOUND_S, killed))
        for s in streams:
            s.join(60)
            assert s.error is not None, s.events[-1:]
        served_again(victim_server)
    record_property("report", f"residue: SIGKILL of the {victim} under load, busy machine: all gone after "
                              f"{', '.join(f'{t:.1f}' for t in took)} s (bound {GONE_BOUND_S:g} s)")


def kill_under_load(repo: Path, victim: str) -> list[float]:
    """REPEAT times, a server of its own (Triton 2.51 does not start a new stub for a decoupled model by itself):
    three streams, then SIGKILL of the stub or of tritonserver; seconds until nothing of the instance was left."""
    took = []
    for _ in range(REPEAT):
        with TritonServer(repo, env=server_env()) as triton:
            triton.wait_ready(timeout=900)
            start_load(triton, MODEL)
            stub = stub_of(triton, MODEL)
            ipc = ipc_directory(stub)
            watch = [p for p in stub.children() if "parent_watch" in cmdline(p)]
            assert len(watch) == 1, [cmdline(p) for p in stub.children()]
            instance = Footprint.of([stub, *engine_of(stub), *watch], ipc)
            if victim == "stub":  # the server is alive and owns the stub's region
                instance.shm -= {a for a in stub.cmdline() if "shm_region" in a}
            killed = time.monotonic()
            (stub if victim == "stub" else triton.process).send_signal(signal.SIGKILL)
            took.append(instance.gone_within(GONE_BOUND_S, killed))
            assert ipc is None or not ipc.exists(), sorted(ipc.rglob("*"))
    return took


def test_a_killed_stub_takes_its_engine_with_it(repo, busy_machine, record_property):
    """vLLM's EngineCore does not watch its parent; the backend's engine watch (a vLLM plugin in the EngineCore)
    ends it, its worker with it, and removes the instance's IPC directory; the parent watch ends with the stub."""
    took = kill_under_load(repo, "stub")
    record_property("report", f"residue: SIGKILL of the stub under load, busy machine: all gone after "
                              f"{', '.join(f'{t:.1f}' for t in took)} s (bound {GONE_BOUND_S:g} s)")


def test_a_killed_tritonserver_takes_its_model_with_it(repo, busy_machine, record_property):
    """With the server gone, the backend's parent watch (a process of its own beside the stub) ends the EngineCore,
    its worker and, if it has not exited by itself, the stub; the stub's region, the engine's shared memory and the
    IPC directory go with them."""
    took = kill_under_load(repo, "tritonserver")
    record_property("report", f"residue: SIGKILL of tritonserver under load, busy machine: all gone after "
                              f"{', '.join(f'{t:.1f}' for t in took)} s (bound {GONE_BOUND_S:g} s)")


def test_a_stub_triton_kills_at_shutdown_leaves_nothing_behind(repo, busy_machine, record_property):
    """Before Triton 2.51 unloads a model instance it asks the stub for a sign of life within one second
    (python_backend's UpdateHealth); a stub that gives none — starved of CPU on a busy host, here stopped with
    SIGSTOP — is SIGKILLed without its finalize, so the backend never shuts its engine down. The engine watch does:
    every process of the model ends on its own, after the server, within the bound, and the launcher, which waits
    that long, finds nothing to kill or unlink."""
    took, outlived = [], []
    for _ in range(REPEAT):
        triton = TritonServer(repo, env=server_env()).start()
        try:
            triton.wait_ready(timeout=900)
            stub = stub_of(triton, MODEL)
            instance = Footprint.of([stub, *engine_of(stub)], ipc_directory(stub))
            instance.shm -= {a for a in stub.cmdline() if "shm_region" in a}  # the server's, unlinked as it exits
            stub.send_signal(signal.SIGSTOP)
            stopped = time.monotonic()
        finally:
            triton.stop()
        assert "engine shut down in" not in triton.log_text()  # Triton killed the stub: no finalize ran
        assert triton.stopped_cleanly, (triton.forced_kills, triton.removed_shm)
        took.append(instance.gone_within(GONE_BOUND_S, stopped))
        outlived.append(triton.outlived_s)
    record_property("report", f"residue: a stub Triton kills at shutdown (SIGSTOP, busy machine): all gone after "
                              f"{', '.join(f'{t:.1f}' for t in took)} s, outliving the server by "
                              f"{', '.join(f'{t:.1f}' for t in outlived)} s (bound {GONE_BOUND_S:g} s)")
