"""Lay out a Triton backend directory: the Python backend (+ the stub for this interpreter) and our `vllm` backend.

    assemble_backends.py DIR            DIR/python (from the nvidia-pytriton wheel, or TRITON_HOME's) and DIR/vllm
    assemble_backends.py --vllm-only D  only our backend, e.g. D=/opt/tritonserver/backends/vllm in an NGC image
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# model.py imports one package with a project-specific name (beside it, on the stub's sys.path); the rooms Triton
# loads are its subpackages. Nothing else goes into the backend directory.
PACKAGE = "vllm_triton_observable"
ROOMS = ("backend", "common", "health", "metrics")
STUB_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def install_vllm_backend(dest: Path) -> None:
    """`model.py` and the package (a copy, not links: the same tree an operator installs)."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(ROOT / "backend" / "model.py", dest / "model.py")
    package = dest / PACKAGE
    if package.exists():
        shutil.rmtree(package)
    package.mkdir()
    shutil.copy2(ROOT / f"{PACKAGE}.py", package / "__init__.py")
    for room in ROOMS:
        shutil.copytree(ROOT / room, package / room, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "model.py"))


def install_python_backend(dest: Path) -> None:
    """Triton's Python backend, with the stub for this interpreter put in place.

    From TRITON_HOME (scripts/env.sh: the nvidia-pytriton wheel's tree, or an NGC container's /opt/tritonserver,
    whose backend already holds the stub for its own Python), else from this interpreter's wheel."""
    home = Path(os.environ.get("TRITON_HOME") or Path(sysconfig.get_paths()["purelib"]) / "pytriton" / "tritonserver")
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(home / "backends" / "python", dest, ignore=shutil.ignore_patterns("__pycache__"))
    stubs = home / "python_backend_stubs"
    if stubs.is_dir():
        shutil.copy2(stubs / STUB_PYTHON / "triton_python_backend_stub", dest)


def main(argv: list[str]) -> None:
    if argv[:1] == ["--vllm-only"]:
        install_vllm_backend(Path(argv[1]))
        return
    target = Path(argv[0])
    install_python_backend(target / "python")
    if (target / "vllm").exists():  # a build directory: start from nothing, so no file of an older layout stays
        shutil.rmtree(target / "vllm")
    install_vllm_backend(target / "vllm")


if __name__ == "__main__":
    main(sys.argv[1:])
