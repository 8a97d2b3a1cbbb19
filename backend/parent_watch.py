"""Takes the model down with tritonserver: a small process of its own beside the stub.

vLLM's EngineCore and its worker are children of the Python stub and watch only each other. When tritonserver dies
without unloading its models (SIGKILL, a crash, the OOM killer), the EngineCore, the worker and their shared memory
would stay behind for good, holding the model's memory (on a GPU, its device memory), and so would the stub's
shared-memory region, which only the server unlinks. The stub is meant to notice and exit within a second, but
under load it was seen alive for more than 30 s, in every run (even after it had shut its engine client down): a
thread inside it, waiting on the GIL with the rest, cannot be relied on.

So the watch is a process, started by the stub before its engine: it waits for the server or the stub to end (on
pidfds: no polling). If the stub ends first, there is nothing to do (Triton, the engine watch and vLLM clean up). If
the server ends first, it unlinks the stub's region, removes the instance's IPC socket directory, sends SIGTERM to
the EngineCore (which shuts down, its worker with it, as when vLLM's own front end stops it), gives the stub a few
seconds to exit and kills it if it has not, and kills whatever of the engine is still running after vLLM's shutdown
grace. Then it unlinks whatever those processes had mapped under /dev/shm and is still there (the stub's resource
tracker unlinks those registered with it; one was still there once with vLLM 0.27.1, its stub killed half-way
through its own shutdown).

Run by its module name in a fresh interpreter (`ParentWatch.start`): it imports psutil, the standard library and
backend.engine_shm, not vLLM, so that it starts in a fraction of a second and holds little memory.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil  # a dependency of vLLM, so present wherever the backend runs

from ..common.helper_process import helper_command
from .engine_shm import mapped_segments, unlink_left_behind

ENGINE_PROCESS_PREFIX = "VLLM::"  # vLLM's process titles: VLLM::EngineCore, VLLM::Worker
STUB_EXIT_GRACE_S = 5.0  # the stub checks its parent every 0.3 s and exits: five seconds means it is stuck
# an engine whose stub is gone exits on SIGTERM as at an unload: 7.5-9 s on two idle cores, ≈ 15 s on busy ones
ENGINE_EXIT_GRACE_S = 20.0
KILLED_EXIT_S = 5.0  # a SIGKILLed process is gone in well under this


def stub_region(argv: list[str]) -> Path | None:
    """The stub's shared-memory region: the second argument Triton starts `triton_python_backend_stub` with."""
    if len(argv) > 2 and Path(argv[0]).name == "triton_python_backend_stub" and "/" not in argv[2]:
        return Path("/dev/shm") / argv[2]
    return None


def engine_processes(stub: psutil.Process) -> list[psutil.Process]:
    """The stub's own engine processes (EngineCore): signalled as vLLM's front end does at shutdown, they stop their
    workers in order; a worker signalled directly can exit without unlinking its shared memory."""
    try:
        return [p for p in stub.children() if p.name().startswith(ENGINE_PROCESS_PREFIX)]
    except psutil.Error:
        return []


def wait_for_exit(*pids: int, timeout_s: float | None = None) -> int | None:
    """Until one of these processes has ended; returns it (None once `timeout_s` has passed). On pidfds (no
    polling), else by polling."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        fds = {os.pidfd_open(pid): pid for pid in pids}
    except OSError:  # a kernel before 5.3, or a process already gone
        while deadline is None or time.monotonic() < deadline:
            for pid in pids:
                if not alive(pid):
                    return pid
            time.sleep(0.5)
        return None
    try:
        ready, _, _ = select.select(list(fds), [], [], timeout_s)  # a pidfd is readable once its process has ended
        return fds[ready[0]] if ready else None
    finally:
        for fd in fds:
            os.close(fd)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _wait_gone(processes: list[psutil.Process], timeout_s: float) -> list[psutil.Process]:
    """Those of `processes` still running after `timeout_s`."""
    _, running = psutil.wait_procs(processes, timeout=timeout_s)
    return [p for p in running if alive(p.pid)]


def _say(line: str) -> None:
    """To the stub's stderr, which is the server's: the server's log is gone with it, its output may not be."""
    try:
        print(f"[vllm] parent watch: {line}", file=sys.stderr, flush=True)
    except OSError:
        pass


def take_down(server_pid: int, stub: psutil.Process, region: Path | None, ipc_root: Path | None) -> None:
    """What the server's death leaves to do: each step bounded, the quick ones first, each already worth having."""
    if region is not None:
        region.unlink(missing_ok=True)  # the stub keeps its mapping; nobody else uses it any more
    if ipc_root is not None:  # open sockets keep working without their files until the engine is down
        shutil.rmtree(ipc_root, ignore_errors=True)
    engines = engine_processes(stub)
    workers = [w for e in engines for w in _children(e)]  # a SIGKILLed EngineCore's workers end by themselves
    held = mapped_segments([p.pid for p in (stub, *engines, *workers)])
    for engine in engines:
        try:
            engine.send_signal(signal.SIGTERM)
        except psutil.Error:
            continue
    _say(f"tritonserver (pid {server_pid}) ended without unloading the model: sent SIGTERM to its EngineCore "
         f"({len(engines)}) so that no engine outlives it")
    if _wait_gone([stub], STUB_EXIT_GRACE_S):
        _say(f"the stub (pid {stub.pid}) had not exited {STUB_EXIT_GRACE_S:g} s after its server: killed it")
        _kill([stub])
    if left := _wait_gone(engines + workers, ENGINE_EXIT_GRACE_S):
        _say(f"{len(left)} engine process(es) still running {ENGINE_EXIT_GRACE_S:g} s after SIGTERM: killed them")
        _kill(left)
        _wait_gone(left, KILLED_EXIT_S)
    if removed := unlink_left_behind(held):
        _say(f"unlinked what the model's processes left in /dev/shm: {', '.join(removed)}")


def _children(process: psutil.Process) -> list[psutil.Process]:
    try:
        return process.children(recursive=True)
    except psutil.Error:
        return []


def _kill(processes: list[psutil.Process]) -> None:
    for process in processes:
        try:
            process.kill()
        except psutil.Error:
            pass


def main(argv: list[str]) -> int:
    server_pid, stub_pid = int(argv[0]), int(argv[1])
    region, ipc_root = (Path(a) if a else None for a in argv[2:4])
    try:
        stub = psutil.Process(stub_pid)
    except psutil.Error:
        return 0
    if wait_for_exit(server_pid, stub_pid) == server_pid and alive(stub_pid):
        take_down(server_pid, stub, region, ipc_root)
    return 0


class ParentWatch:
    """Starts the watch process for this stub (one per model instance); it ends with the stub."""

    def __init__(self, log_info: Callable[[str], None], server_pid: int | None = None,
                 ipc_root: Path | None = None) -> None:
        self._log_info = log_info
        self._server_pid = server_pid or os.getppid()
        self._ipc_root = ipc_root  # the instance's IPC socket directory (backend.ipc_dir)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        region = stub_region(psutil.Process().cmdline())
        command = helper_command(__name__, [str(self._server_pid), str(os.getpid()), str(region or ""),
                                            str(self._ipc_root or "")])
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True, close_fds=True)
        self._log_info(f"parent watch: pid {self.process.pid} takes the engine down if tritonserver "
                       f"(pid {self._server_pid}) ends without unloading the model")

