"""The instance's IPC socket directories (pure file-system logic; the real engine's sockets are checked end to end
in tests/integration/test_lifecycle.py and test_health.py)."""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from vllm_triton_observable.backend.ipc_dir import PREFIX, RPC_BASE_PATH, SOCKET_PATH_MAX, IpcDirectory, sweep
from vllm_triton_observable.common.errors import ConfigError


@pytest.fixture
def short_base():
    """pytest's tmp_path is itself too long a base for socket paths."""
    base = Path(tempfile.mkdtemp(prefix="ipc", dir="/tmp"))
    yield base
    shutil.rmtree(base, ignore_errors=True)


def test_each_engine_gets_a_directory_of_its_own_under_the_instances(short_base):
    environ = {RPC_BASE_PATH: str(short_base)}
    ipc = IpcDirectory.create(environ)
    assert ipc.root.parent == short_base and ipc.root.name.startswith(f"{PREFIX}{os.getpid()}-")
    first = ipc.for_next_engine(environ)
    assert environ[RPC_BASE_PATH] == str(first) and first.is_dir()
    second = ipc.for_next_engine(environ)
    assert second != first and environ[RPC_BASE_PATH] == str(second)
    (second / "a-socket").touch()
    ipc.remove()
    assert not ipc.root.exists()


def test_a_load_sweeps_the_directories_of_stubs_that_are_gone(tmp_path):
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = tmp_path / f"{PREFIX}{gone.stdout.strip()}-abc"
    (dead / "1").mkdir(parents=True)
    (dead / "1" / "left-behind").touch()
    alive = tmp_path / f"{PREFIX}{os.getppid()}-abc"  # a process that runs
    alive.mkdir()
    unrelated = tmp_path / "someone-elses"
    unrelated.mkdir()
    assert sweep(tmp_path) == [dead]
    assert not dead.exists() and alive.exists() and unrelated.exists()


def test_a_temp_directory_too_long_for_a_socket_path_falls_back_to_tmp(tmp_path, monkeypatch):
    deep = tmp_path / ("d" * (SOCKET_PATH_MAX - len(str(tmp_path))))
    deep.mkdir()
    monkeypatch.setattr("tempfile.gettempdir", lambda: str(deep))
    ipc = IpcDirectory.create({})
    try:
        assert str(ipc.root.parent) == "/tmp"
    finally:
        ipc.remove()


def test_an_operators_base_path_too_long_fails_the_load_saying_what_to_set(tmp_path):
    deep = tmp_path / ("d" * (SOCKET_PATH_MAX - len(str(tmp_path))))
    deep.mkdir()
    with pytest.raises(ConfigError, match=f"set {RPC_BASE_PATH} to a short writable directory"):
        IpcDirectory.create({RPC_BASE_PATH: str(deep)})
