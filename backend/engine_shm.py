"""The shared memory an engine's processes map, so that what a killed engine leaves behind can be unlinked.

vLLM's EngineCore creates the queue to its workers in /dev/shm (`psm_*`, Python's SharedMemory) and registers it
with multiprocessing's resource tracker, which unlinks leftovers only when every process of its family has exited —
the stub's included, so a SIGKILLed EngineCore's queue would stay until the model unloads, once per restart in
place. The backend notes the segments each engine's processes map once it runs, and after that engine is shut
down unlinks those still there that this process does not map (an orderly shutdown has unlinked them already).
"""

from __future__ import annotations

import os
from pathlib import Path

SHM = Path("/dev/shm")


def mapped_segments(pids: list[int]) -> set[str]:
    """Names under /dev/shm that these processes map (processes already gone count for nothing)."""
    names: set[str] = set()
    for pid in pids:
        try:
            lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            path = line.split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
            if path.startswith(f"{SHM}/"):
                names.add(path[len(f"{SHM}/"):].removesuffix(" (deleted)"))
    return names


def unlink_left_behind(names: set[str]) -> list[str]:
    """Unlink those of `names` that still exist and this process does not map; returns them."""
    ours = mapped_segments([os.getpid()])
    removed = []
    for name in sorted(names - ours):
        try:
            (SHM / name).unlink()
        except OSError:
            continue
        removed.append(name)
    return removed
