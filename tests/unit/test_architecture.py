"""The rooms' dependencies point one way: import-linter's contracts in pyproject.toml, checked on the package as
it is installed (a fresh copy laid out by scripts/assemble_backends.py) and on the repository's tool packages.

    common          imports no other room
    metrics, health, tracing
                    import only common, never each other (health's needs are the interfaces in health/ports.py)
    backend         imports common; only its composition root (plan.py, model_instance.py, parameter_reference.py)
                    wires in metrics, health and tracing
    observability   the metric names, registry helpers and label values (no engine, no backend)
    dashboards      observability, the metric names, which vLLM release brought a family
    alerts          observability, the metric names, the dashboards' definitions (their panel ids)
    deploy          observability, alerts and the dashboards' definitions
Beside the contracts, one style rule import-linter has no words for: nothing imports a room by a generic
top-level name (`backend`, `metrics`, ...), only as vllm_triton_observable.*.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from assemble_backends import ROOMS  # the rooms the installer lays out, named once

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("observability", "dashboards", "alerts", "deploy")  # the repository's generator packages


def lint_imports(tmp_path: Path, config: Path) -> subprocess.CompletedProcess:
    """import-linter on a fresh copy of the package (grimp needs it as a directory, not the repository's
    module-style layout) beside the repository's tool packages."""
    subprocess.run([sys.executable, str(ROOT / "scripts" / "assemble_backends.py"), "--vllm-only",
                    str(tmp_path / "vllm")], check=True, capture_output=True)
    env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'vllm'}{os.pathsep}{ROOT}", "NO_COLOR": "1"}
    return subprocess.run([str(Path(sys.executable).parent / "lint-imports"), "--config", str(config), "--no-cache"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_the_import_contracts_are_kept(tmp_path):
    result = lint_imports(tmp_path, ROOT / "pyproject.toml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "4 kept, 0 broken" in result.stdout, result.stdout


def test_import_linter_sees_a_broken_contract(tmp_path):
    """The contracts would pass vacuously if the graph were empty: common above backend must break."""
    config = tmp_path / "broken.toml"
    config.write_text('[tool.importlinter]\nroot_packages = ["vllm_triton_observable"]\n'
                      '[[tool.importlinter.contracts]]\nname = "upside down"\ntype = "layers"\n'
                      'layers = ["vllm_triton_observable.common", "vllm_triton_observable.backend"]\n')
    result = lint_imports(tmp_path, config)
    assert result.returncode != 0 and "BROKEN" in result.stdout, result.stdout + result.stderr
    assert "vllm_triton_observable.backend." in result.stdout  # it names an import that breaks it


def python_files(folder: str) -> list[Path]:
    """The folder's modules, its packages' (alerts/groups/) included."""
    return sorted((ROOT / folder).rglob("*.py"))


def generic_imports(path: Path) -> set[str]:
    """The absolute imports of a room by its folder's name (`import metrics.registry`, `from backend import x`)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            modules = [node.module]
        elif isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        else:
            continue
        found |= {module for module in modules if module.split(".")[0] in ROOMS}
    return found


def test_nothing_imports_a_room_by_a_generic_name():
    everywhere = [p for folder in (*ROOMS, *TOOLS, "scripts", "tests/unit", "tests/integration")
                  for p in python_files(folder)]
    generic = {str(p.relative_to(ROOT)): sorted(generic_imports(p)) for p in everywhere}
    assert not {k: v for k, v in generic.items() if v}


def test_the_generic_name_check_sees_one(tmp_path):
    """The rule above would pass vacuously if it found nothing: it must see both kinds, and only those."""
    sample = tmp_path / "x.py"
    sample.write_text("import metrics.registry\nfrom backend import generation\nfrom ..common import errors\n"
                      "from vllm_triton_observable.health import monitor\nimport observability.config\n")
    assert generic_imports(sample) == {"metrics.registry", "backend"}
