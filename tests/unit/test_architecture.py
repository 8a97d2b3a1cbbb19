"""The rooms' dependencies point one way, read from the import statements themselves.

    common          imports no other room
    metrics, health import only common (health's needs are the interfaces in health/ports.py)
    backend         imports common; only its composition root (model_instance.py) and model.py wire in
                    metrics and health
    observability   imports only the metric names, registry helpers and label values (no engine, no backend)
    dashboards      imports observability, the metric names and which vLLM release brought a family;
                    alerts observability and the metric names, never dashboards
    deploy          imports observability and alerts (the dashboards it reads as generated files)
Nothing imports a room by a generic top-level name (`backend`, `metrics`, ...): only as vllm_triton_observable.*.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "vllm_triton_observable"
ROOMS = ("backend", "common", "health", "metrics")
TOOLS = ("observability", "dashboards", "alerts", "deploy")
COMPOSITION_ROOT = {"backend/model_instance.py", "backend/model.py"}
ALLOWED: dict[str, set[str]] = {
    "common": set(),
    "metrics": {"common"},
    "health": {"common"},
    "backend": {"common"},
    "observability": {"metrics.names", "metrics.registry", "common.vocabulary"},
    "dashboards": {"observability", "metrics.names", "metrics.registry", "common.vllm_compat"},
    "alerts": {"observability", "metrics.names", "metrics.registry"},
    "deploy": {"observability", "alerts"},
}


def python_files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).glob("*.py"))


def imported(path: Path) -> set[str]:
    """What a file imports from the project, as 'room' or 'room.module' (its own room included)."""
    room = path.parent.name
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = [] if node.level == 2 else [room]
            parts = [*base, *(node.module.split(".") if node.module else [])]
            if not parts:  # `from .. import __version__`: the package itself
                continue
            names = [f"{parts[0]}.{a.name}" for a in node.names] if len(parts) == 1 else [".".join(parts[:2])]
            found.update(names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] == PACKAGE and node.module.count(".") == 1:  # from pkg.room import module
                found.update(_project_name(f"{node.module}.{a.name}") for a in node.names)
            else:
                found.add(_project_name(node.module))
        elif isinstance(node, ast.Import):
            found.update(_project_name(a.name) for a in node.names)
    return {name for name in found if name}


def _project_name(module: str) -> str:
    parts = module.split(".")
    if parts[0] == PACKAGE:
        return ".".join(parts[1:3])
    if parts[0] in ROOMS:
        return f"GENERIC:{module}"
    return ".".join(parts[:2]) if parts[0] in TOOLS else ""


def allowed(room: str, name: str) -> bool:
    target = name.split(".")[0]
    return target == room or target in ALLOWED[room] or name in ALLOWED[room]


@pytest.mark.parametrize("room", [*ROOMS, *TOOLS])
def test_each_room_imports_only_what_it_may(room):
    wrong = {}
    for path in python_files(room):
        relative = f"{room}/{path.name}"
        if relative in COMPOSITION_ROOT:
            continue
        bad = sorted(n for n in imported(path) if not allowed(room, n))
        if bad:
            wrong[relative] = bad
    assert not wrong, wrong


def test_the_composition_root_is_the_only_place_that_wires_rooms():
    root = imported(ROOT / "backend" / "model_instance.py")
    assert {n.split(".")[0] for n in root} >= {"backend", "common", "health", "metrics"}


def test_nothing_imports_a_room_by_a_generic_name():
    everywhere = [p for folder in (*ROOMS, *TOOLS, "scripts", "tests/unit", "tests/integration")
                  for p in python_files(folder)]
    generic = {str(p.relative_to(ROOT)): sorted(n for n in imported(p) if n.startswith("GENERIC:"))
               for p in everywhere}
    assert not {k: v for k, v in generic.items() if v}


def test_the_checker_sees_a_wrong_import(tmp_path):
    """The rules above would pass vacuously if `imported` found nothing: it must see each kind of import."""
    sample = tmp_path / "health" / "x.py"
    sample.parent.mkdir()
    sample.write_text("from ..backend.generation import A\nfrom .ports import B\nfrom ..common import errors\n"
                      "import metrics.registry\nfrom vllm_triton_observable.metrics.names import C\n")
    assert imported(sample) == {"backend.generation", "health.ports", "common.errors", "GENERIC:metrics.registry",
                                "metrics.names"}
    assert [n for n in sorted(imported(sample)) if not allowed("health", n)] == [
        "GENERIC:metrics.registry", "backend.generation", "metrics.names"]
