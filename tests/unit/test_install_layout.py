"""What `make install-backend` puts into a Triton backend directory: `model.py` and one package with a
project-specific name, which imports cleanly when modules named `backend`, `metrics`, `health` and `common` come
first on `sys.path` (as other code in a Triton container may put them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GENERIC = ("backend", "metrics", "health", "common", "tracing")

IMPORT_EVERYTHING = """
import importlib, pkgutil, sys
sys.path[:0] = [{decoys!r}, {dest!r}]
import model
import vllm_triton_observable as package
modules = [info.name for info in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
for name in modules:
    importlib.import_module(name)
assert package.__file__.startswith({dest!r}), package.__file__
assert not set({generic!r}) & set(sys.modules), sorted(set({generic!r}) & set(sys.modules))
print(len(modules))
"""


@pytest.fixture(scope="module")
def dest(tmp_path_factory):
    """What `make install-backend DEST=...` writes."""
    target = tmp_path_factory.mktemp("backends") / "vllm"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "assemble_backends.py"), "--vllm-only", str(target)],
                   check=True)
    return target


def test_the_installed_backend_is_model_py_and_one_package(dest):
    assert sorted(p.name for p in dest.iterdir()) == ["model.py", "vllm_triton_observable",
                                                      "vllm_triton_observable-0.1.0.dist-info"]


def test_the_package_registers_its_vllm_plugin_where_vllm_looks(dest):
    """vLLM loads the `vllm.general_plugins` entry points it finds on sys.path (the backend directory is on it)."""
    found = subprocess.run([sys.executable, "-c", f"""
import sys; sys.path.insert(0, {str(dest)!r})
from importlib.metadata import entry_points
print([e.value for e in entry_points(group="vllm.general_plugins") if e.name == "vllm_triton_engine_watch"])
"""], capture_output=True, text=True, check=True).stdout
    assert found.strip() == "['vllm_triton_observable.backend.engine_watch:register']", found
    package = dest / "vllm_triton_observable"
    assert sorted(p.name for p in package.iterdir()) == ["__init__.py", *sorted(GENERIC)]
    assert not (package / "backend" / "model.py").exists()


def test_it_imports_next_to_modules_with_generic_names(dest, tmp_path):
    decoys = tmp_path / "decoys"
    for name in GENERIC:
        (decoys / name).mkdir(parents=True)
        (decoys / name / "__init__.py").write_text(f"raise ImportError('the decoy {name} was imported')\n")
    # Only Triton's stub provides this module; importing ours needs no more than its name.
    (decoys / "triton_python_backend_utils.py").write_text("TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1\n")
    code = IMPORT_EVERYTHING.format(decoys=str(decoys), dest=str(dest), generic=GENERIC)
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                            env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr[-3000:]
    assert int(result.stdout.split()[-1]) >= 30  # every module of every room was imported
