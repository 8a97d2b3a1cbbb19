"""The command line of the backend's own helper processes (the parent watch, the span exporter): one of the
package's modules run in a fresh interpreter, by its module name.

The interpreter is multiprocessing's — the one vLLM's spawned EngineCore runs on, with this environment's
packages — because the stub's own executable is Triton's, not Python. The module is imported from the backend's
package, not from the working directory, and a terminal's Ctrl-C is left to tritonserver (it unloads the models,
and the helpers end with their stubs)."""

from __future__ import annotations

import multiprocessing.spawn
import sys
from pathlib import Path

# `python -c LAUNCH PACKAGE_ROOT MODULE ARGS...`: MODULE's main(ARGS) is the process's exit status.
LAUNCH = ("import importlib, signal, sys; sys.path[0] = sys.argv[1]; "
          "signal.signal(signal.SIGINT, signal.SIG_IGN); "
          "sys.exit(importlib.import_module(sys.argv[2]).main(sys.argv[3:]))")


def helper_command(module: str, args: list[str]) -> list[str]:
    return [multiprocessing.spawn.get_executable(), "-c", LAUNCH, str(import_root()), module, *args]


def import_root() -> Path:
    """The directory the backend's package is imported from (installed: beside model.py; the repository: its root,
    where the package is a module naming its rooms)."""
    top = Path(sys.modules[__name__.split(".")[0]].__file__ or "")
    return top.parents[1] if top.name == "__init__.py" else top.parent
