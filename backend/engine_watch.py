"""Takes the EngineCore down with its stub: a vLLM general plugin, run in every vLLM process of the backend's.

vLLM's EngineCore does not watch the process that started it (its workers watch the EngineCore through a pipe). When
the stub dies without shutting the engine down — SIGKILL, a crash, the OOM killer — the EngineCore and its workers
would stay behind for good, holding the model's memory (on a GPU, its device memory). The parent watch
(backend.parent_watch) acts only when tritonserver ends, and ends with the stub. So the EngineCore watches the stub
itself: the backend registers this module as a vLLM general plugin (the `vllm.general_plugins` entry point installed
beside model.py), which vLLM loads in each of its processes; in a direct child of the stub named by
VLLM_TRITON_STUB_PID — the EngineCore, spawned or forked — it starts a thread that waits for the stub to end (on a
pidfd: no polling), removes the instance's IPC socket directory (backend.ipc_dir) and sends the EngineCore SIGTERM,
which shuts it down — its workers with it — as when vLLM's own front end stops it.

Elsewhere (the stub, the workers, any other vLLM) it does nothing.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
from pathlib import Path

STUB_PID = "VLLM_TRITON_STUB_PID"  # set by the stub before it builds an engine (backend.model_instance)
_started = False  # the watch runs in this process
_fork_hook = False  # this process (the stub) starts it in its forked children


def _watch(stub: int, ipc_engine_dir: str | None) -> None:
    from .parent_watch import wait_for_exit

    wait_for_exit(stub)
    if ipc_engine_dir:
        from .ipc_dir import PREFIX

        root = Path(ipc_engine_dir).parent
        if root.name.startswith(PREFIX):
            shutil.rmtree(root, ignore_errors=True)
    os.kill(os.getpid(), signal.SIGTERM)


def _stub_pid() -> int | None:
    stub = os.environ.get(STUB_PID, "")
    return int(stub) if stub.isdigit() else None


def _start_if_engine_core() -> None:
    """In a direct child of the stub (the EngineCore): start the watch, once."""
    global _started
    stub = _stub_pid()
    if _started or stub is None or os.getppid() != stub:
        return
    _started = True
    threading.Thread(target=_watch, args=(stub, os.environ.get("VLLM_RPC_BASE_PATH")),
                     name="vllm-triton-stub-watch", daemon=True).start()


def register() -> None:
    """vLLM's plugin hook. vLLM starts the EngineCore by spawning it (it then loads its plugins, and this starts
    the watch) or by forking the stub (a forked child does not load them again: the stub's fork hook starts it)."""
    global _fork_hook
    stub = _stub_pid()
    if stub is None:
        return
    if os.getpid() == stub:
        if not _fork_hook:
            os.register_at_fork(after_in_child=_start_if_engine_core)
            _fork_hook = True
        return
    _start_if_engine_core()
