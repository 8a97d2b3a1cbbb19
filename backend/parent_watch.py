"""Takes the engine down with tritonserver.

vLLM's EngineCore and its worker are children of the Python stub and watch only each other. When tritonserver dies
without unloading its models (SIGKILL, a crash, the OOM killer), the stub notices and exits within a second, but the
EngineCore, the worker and their shared memory stay behind for good, holding the model's memory (on a GPU, its
device memory), and so does the stub's shared-memory region, which only the server unlinks. This thread waits for
the server process to end (on a pidfd: no polling), unlinks the region, removes the instance's IPC socket directory
and sends SIGTERM to the EngineCore, which shuts down — its worker with it — as when vLLM's own front end stops it.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Any

import psutil  # a dependency of vLLM, so present wherever the backend runs

ENGINE_PROCESS_PREFIX = "VLLM::"  # vLLM's process titles: VLLM::EngineCore, VLLM::Worker


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


def wait_for_parent_exit(pid: int) -> None:
    """Until process `pid`, this process's parent, has ended: on a pidfd (no polling), else by polling."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:  # a kernel before 5.3, or the process already gone
        while psutil.pid_exists(pid) and os.getppid() == pid:
            time.sleep(0.5)
        return
    try:
        select.select([fd], [], [])  # readable once the process has ended
    finally:
        os.close(fd)


class ParentWatch:
    def __init__(self, log: Any, server_pid: int | None = None, ipc_root: Path | None = None) -> None:
        self._log = log
        self._ipc_root = ipc_root  # the instance's IPC socket directory (backend.ipc_dir)
        self._server_pid = server_pid or os.getppid()
        self._thread = threading.Thread(target=self._run, name="vllm-parent-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        wait_for_parent_exit(self._server_pid)
        # The stub exits by itself within about a second: the quick steps first, each already worth having.
        stub = psutil.Process()
        if (region := stub_region(stub.cmdline())) is not None:
            region.unlink(missing_ok=True)  # this process keeps its mapping; nobody else uses it any more
        if self._ipc_root is not None:  # open sockets keep working without their files until the engine is down
            shutil.rmtree(self._ipc_root, ignore_errors=True)
        processes = engine_processes(stub)
        for process in processes:
            try:
                process.send_signal(signal.SIGTERM)
            except psutil.Error:
                continue
        if processes:
            try:  # the log goes through the server that just ended: it may not arrive
                self._log.error(f"tritonserver (pid {self._server_pid}) ended without unloading the model: sent "
                                f"SIGTERM to its EngineCore ({len(processes)}) so that no engine outlives it")
            except Exception:
                pass
