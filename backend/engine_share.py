"""Where a model's Triton instances meet to share one vLLM engine (`SHARED_ENGINE`).

Triton starts each instance of `instance_group { count: N }` as a stub process of its own, and a stub is one
process: at tens of thousands of tokens per second its one core paces the tokens (docs/benchmarks.md, "When the stub
is the limit"). `vllm serve --api-server-count N` spreads its front end the same way — N processes, each a client of
one EngineCore with a request socket and an output socket of its own — but it starts them as its children and hands
them the addresses; Triton's stubs are siblings. So they meet in a directory named after tritonserver's pid and the
model: each claims a slot file (its pid inside), slot 0 starts the engine for all N, and every client's socket
addresses follow from the slot number alone, so no instance waits for another to start: the EngineCore connects to
an address before or after its client binds it (ZeroMQ reconnects), and its ready message waits in the socket.

The directory's name starts with the IPC directories' prefix (backend.ipc_dir): the next load on the host sweeps it
once tritonserver is gone.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..common.errors import ConfigError
from .ipc_dir import of_server
from .parent_watch import alive, wait_for_exit

OWNER = 0  # the slot that starts (and restarts, and shuts down) the engine
GENERATIONS = 4  # loads of one model that may run at once (a reload starts the new before the old is unloaded)
LOCK_TIMEOUT_S = 10.0  # a claim takes milliseconds: a lock held this long is held by a process that is stuck


class EngineShare:
    def __init__(self, directory: Path, clients: int, index: int) -> None:
        self.directory = directory
        self.clients = clients
        self.index = index

    @classmethod
    def join(cls, base: Path, server_pid: int, model: str, version: str, clients: int) -> EngineShare:
        """Claim the lowest free slot of this model's share (under the share's lock: two stubs starting at
        once never get the same one); a slot whose stub is gone is taken over. Where every slot is held by a
        running instance, a load of the model while the earlier one still serves (Triton loads the new instances
        before it unloads the old): the new instances meet in the next share, for an engine of their own."""
        key = hashlib.sha256(f"{model}\0{version}".encode()).hexdigest()[:12]
        for generation in range(GENERATIONS):
            directory = of_server(base, server_pid, f"share-{key}-{generation}")
            directory.mkdir(exist_ok=True)
            with _locked(directory):
                index = cls._claim(directory, clients)
            if index is not None:
                return cls(directory, clients, index)
        raise ConfigError(f"SHARED_ENGINE: model {model!r} already has {GENERATIONS} loads of {clients} instances "
                          "running, each with its engine: unload the model before loading it again")

    @classmethod
    def _claim(cls, directory: Path, clients: int) -> int | None:
        """The first slot that is free or whose stub is gone, now this process's (under the share's lock)."""
        for index in range(clients):
            slot = directory / f"slot-{index}"
            if not slot.exists() or not alive(cls._pid_in(slot)):
                slot.write_text(str(os.getpid()))
                return index
        return None

    @staticmethod
    def _pid_in(slot: Path) -> int:
        try:
            return int(slot.read_text() or 0)
        except (OSError, ValueError):
            return 0

    @property
    def owner(self) -> bool:
        return self.index == OWNER

    def addresses(self) -> tuple[list[str], list[str]]:
        """Every client's request (ROUTER) and output (PULL) socket, by slot."""
        return ([f"ipc://{self.directory}/in-{i}" for i in range(self.clients)],
                [f"ipc://{self.directory}/out-{i}" for i in range(self.clients)])

    def owner_pid(self) -> int:
        """The stub whose child the EngineCore is (0 until slot 0 is taken)."""
        return self._pid_in(self.directory / f"slot-{OWNER}")

    def others(self) -> list[int]:
        """The pids of the other instances still holding a slot."""
        pids = [self._pid_in(slot) for slot in self.directory.glob("slot-*") if slot.name != f"slot-{self.index}"]
        return [pid for pid in pids if pid and alive(pid)]

    def wait_for_others(self, timeout_s: float) -> list[int]:
        """The owner, before it shuts the engine down: until every other instance has left (drained and closed
        its client) or the bound has passed; returns those still there."""
        deadline = time.monotonic() + timeout_s
        while (left := self.others()) and time.monotonic() < deadline:
            time.sleep(0.1)
        return left

    def leave(self) -> None:
        """Give the slot back; the owner, last, removes the directory with its sockets."""
        (self.directory / f"slot-{self.index}").unlink(missing_ok=True)
        if self.owner:
            shutil.rmtree(self.directory, ignore_errors=True)


class OwnersEngine:
    """The EngineCore another instance started, as vLLM's client watches its own engine manager: an instance that
    is not the owner learns of the engine's death the way the owner does (its requests end with vLLM's
    EngineDeadError), not only from the health monitor's probes. Shutting this client down stops the watch and
    leaves the engine to its owner."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self._stopped = threading.Event()

    def monitor_engine_liveness(self) -> None:
        """Return once an EngineCore process has ended (checking for a shutdown every second)."""
        while not self._stopped.is_set():
            if not self.pids or wait_for_exit(*self.pids, timeout_s=1.0) is not None:
                return

    def shutdown(self, *_args: Any, **_kwargs: Any) -> None:
        self._stopped.set()


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    """The share's lock, held while a slot is claimed: instances start at the same moment, and a slot file seen
    before its creator has written its pid in it would look like the slot of a stub that is gone (two instances
    once both claimed slot 0, and so both started an engine)."""
    deadline = time.monotonic() + LOCK_TIMEOUT_S
    with open(directory / ".lock", "a") as lock:
        while True:
            try:  # released when the file is closed, or its process ends
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ConfigError(f"SHARED_ENGINE: another instance held {directory / '.lock'} for more than "
                                      f"{LOCK_TIMEOUT_S:g} s while claiming its slot (a stopped process?)") from None
                time.sleep(0.01)
        yield
