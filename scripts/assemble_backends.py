"""Lay out a Triton backend directory: the Python backend (+ the stub for this interpreter) and our `vllm` backend.

    assemble_backends.py DIR            DIR/python (from the nvidia-pytriton wheel, or TRITON_HOME's) and DIR/vllm
    assemble_backends.py --vllm-only D  only our backend, e.g. D=/opt/tritonserver/backends/vllm in an NGC image
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# model.py imports one package with a project-specific name (beside it, on the stub's sys.path); the rooms Triton
# loads are its subpackages. Beside them only the package's metadata, which registers its vLLM general plugin
# (backend.engine_watch: the EngineCore ends with its stub); vLLM finds it on the sys.path its processes inherit.
PACKAGE = "vllm_triton_observable"
ENGINE_WATCH = "vllm_triton_engine_watch = vllm_triton_observable.backend.engine_watch:register"
ROOMS = ("backend", "common", "health", "metrics", "tracing")
STUB_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
VERSION = next(line.split('"')[1] for line in (ROOT / f"{PACKAGE}.py").read_text().splitlines()
               if line.startswith("__version__"))
# what the installed package was made from, in its metadata (not a file beside model.py)
SOURCE_DIGEST = f"{PACKAGE}-{VERSION}.dist-info/SOURCE_DIGEST"


def _digest(files: list[tuple[str, Path]], how: str = "content") -> str:
    """A digest of these files (by content, or by size and mtime for a large tree that is only ever replaced)."""
    digest = hashlib.sha256()
    for name, path in sorted(files):
        stat = path.stat()
        digest.update(name.encode() + b"\0")
        digest.update(path.read_bytes() if how == "content" else f"{stat.st_size} {stat.st_mtime_ns}".encode())
    return digest.hexdigest()


def _tree(root: Path) -> list[tuple[str, Path]]:
    return [(str(p.relative_to(root)), p) for p in root.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"]


def _unchanged(stamp: Path, digest: str) -> bool:
    """Whether the installed copy was made from exactly these sources. Then nothing is rewritten: servers that are
    running from it (the test suite runs setup again beside them) never see a half-copied tree."""
    return stamp.is_file() and stamp.read_text() == digest


def _vllm_sources() -> list[tuple[str, Path]]:
    files = [("model.py", ROOT / "backend" / "model.py"), (f"{PACKAGE}.py", ROOT / f"{PACKAGE}.py"),
             ("assemble_backends.py", Path(__file__).resolve())]
    for room in ROOMS:
        files += [(f"{room}/{name}", path) for name, path in _tree(ROOT / room)]
    return files


def install_vllm_backend(dest: Path) -> None:
    """`model.py` and the package (a copy, not links: the same tree an operator installs)."""
    digest = _digest(_vllm_sources())
    if _unchanged(dest / SOURCE_DIGEST, digest):
        return
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(ROOT / "backend" / "model.py", dest / "model.py")
    package = dest / PACKAGE
    if package.exists():
        shutil.rmtree(package)
    package.mkdir()
    shutil.copy2(ROOT / f"{PACKAGE}.py", package / "__init__.py")
    for room in ROOMS:
        shutil.copytree(ROOT / room, package / room, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "model.py"))
    for old in dest.glob(f"{PACKAGE}-*.dist-info"):
        shutil.rmtree(old)
    info = dest / f"{PACKAGE}-{VERSION}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PACKAGE.replace('_', '-')}\nVersion: {VERSION}\n")
    (info / "entry_points.txt").write_text(f"[vllm.general_plugins]\n{ENGINE_WATCH}\n")
    (dest / SOURCE_DIGEST).write_text(digest)


def install_python_backend(dest: Path) -> None:
    """Triton's Python backend, with the stub for this interpreter put in place.

    From TRITON_HOME (scripts/env.sh: the nvidia-pytriton wheel's tree, or an NGC container's /opt/tritonserver,
    whose backend already holds the stub for its own Python), else from this interpreter's wheel."""
    home = Path(os.environ.get("TRITON_HOME") or Path(sysconfig.get_paths()["purelib"]) / "pytriton" / "tritonserver")
    sources = [(str(path), path) for tree in (home / "backends" / "python", home / "python_backend_stubs")
               if tree.is_dir() for _, path in _tree(tree)]
    digest = _digest(sources, how="stat")
    if _unchanged(dest / ".source-digest", digest):
        return
    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(home / "backends" / "python", dest, ignore=shutil.ignore_patterns("__pycache__"))
    stubs = home / "python_backend_stubs"
    if stubs.is_dir():
        shutil.copy2(stubs / STUB_PYTHON / "triton_python_backend_stub", dest)
    (dest / ".source-digest").write_text(digest)


def main(argv: list[str]) -> None:
    if argv[:1] == ["--vllm-only"]:
        install_vllm_backend(Path(argv[1]))
        return
    target = Path(argv[0])
    install_python_backend(target / "python")
    vllm = target / "vllm"
    if vllm.exists() and not _unchanged(vllm / SOURCE_DIGEST, _digest(_vllm_sources())):
        shutil.rmtree(vllm)  # a build directory: start from nothing, so no file of an older layout stays
    install_vllm_backend(vllm)


if __name__ == "__main__":
    main(sys.argv[1:])
