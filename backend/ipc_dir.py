"""vLLM's ZeroMQ IPC socket files, in directories this model instance owns.

vLLM names its IPC endpoints `ipc://$VLLM_RPC_BASE_PATH/<uuid>` (the temp directory unless set; every supported
release reads it when it makes an endpoint) and leaves about six socket files per engine start behind, forever: a
flapping engine under `HEALTH_RECOVERY=restart` would fill the temp directory on every host. So each instance gets
a directory of its own (named with the stub's pid), each engine it starts a subdirectory, removed once that engine
is shut down; the instance's directory goes at unload, and the parent watch removes it when tritonserver dies
without unloading. A stub killed outright cannot clean up: the next load on the host sweeps the directories of
stubs that are gone.

The variable is set in the stub's environment just before each engine is built; the EngineCore and its workers
inherit it (vLLM caches its environment only inside those processes, after they started).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import psutil  # a dependency of vLLM, so present wherever the backend runs

from ..common.errors import ConfigError

RPC_BASE_PATH = "VLLM_RPC_BASE_PATH"
PREFIX = "vllm-triton-ipc-"
SOCKET_PATH_MAX = 107  # a Unix socket's sun_path, less its terminating NUL
_LONGEST_NAME = len("/9999/") + 36  # an engine's subdirectory and vLLM's uuid4 file name


def _fits(base: Path) -> bool:
    return len(f"{base}/{PREFIX}{os.getpid()}-xxxxxxxx") + _LONGEST_NAME <= SOCKET_PATH_MAX


def of_server(base: Path, server_pid: int, name: str) -> Path:
    """A path under `base` that tritonserver's instances share (named after the server's pid, so the next load's
    sweep removes it once that server is gone)."""
    return base / f"{PREFIX}{server_pid}-{name}"


def sweep(base: Path) -> list[Path]:
    """Remove the directories of stubs that no longer run (killed before they could clean up); returns them."""
    removed = []
    for path in base.glob(PREFIX + "*"):
        pid = path.name[len(PREFIX):].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not psutil.pid_exists(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


class IpcDirectory:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._engines = 0

    @classmethod
    def create(cls, environ: dict[str, str] | os._Environ[str] = os.environ) -> IpcDirectory:
        """Under the operator's VLLM_RPC_BASE_PATH if set, else the temp directory — or /tmp, where the temp
        directory's path is too long for a socket path (vLLM's engine would fail to start)."""
        chosen = environ.get(RPC_BASE_PATH)
        candidates = [Path(chosen)] if chosen else [Path(tempfile.gettempdir()), Path("/tmp")]
        base = next((c for c in candidates if _fits(c) and os.access(c, os.W_OK)), None)
        if base is None:
            raise ConfigError(f"vLLM's IPC socket paths under {candidates[0]} would be longer than the "
                              f"{SOCKET_PATH_MAX} characters a Unix socket allows: set {RPC_BASE_PATH} to a short "
                              "writable directory, such as /tmp")
        sweep(base)
        return cls(Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=base)))

    def for_next_engine(self, environ: dict[str, str] | os._Environ[str] = os.environ) -> Path:
        """A fresh subdirectory, made vLLM's base path for the engine about to be built."""
        self._engines += 1
        path = self.root / str(self._engines)
        path.mkdir(parents=True, exist_ok=True)
        environ[RPC_BASE_PATH] = str(path)
        return path

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
