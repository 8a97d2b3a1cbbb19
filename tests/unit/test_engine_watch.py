"""The engine watch with real processes (no vLLM): a child of a "stub" ends when the stub is SIGKILLed, whether it
was forked (the stub's fork hook starts the watch) or spawned (the child's own plugin call does), and the instance's
IPC directory goes with it. The real EngineCore is checked in tests/integration/test_residue.py."""

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from vllm_triton_observable.backend.ipc_dir import PREFIX

ROOT = Path(__file__).resolve().parents[2]
STUB = """
import multiprocessing, os, sys, time
sys.path.insert(0, {root!r})
from vllm_triton_observable.backend import engine_watch


def engine_core():
    engine_watch.register()  # what vLLM's plugin loading does in a spawned process (a forked one skips it)
    time.sleep(60)


if __name__ == "__main__":
    os.environ["VLLM_TRITON_STUB_PID"] = str(os.getpid())
    os.environ["VLLM_RPC_BASE_PATH"] = {engine_dir!r}
    engine_watch.register()  # the stub's own plugin call
    child = multiprocessing.get_context({method!r}).Process(target=engine_core)
    child.start()
    print(child.pid, flush=True)
    time.sleep(60)
"""


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_an_engine_core_ends_with_its_stub_and_takes_the_ipc_directory(tmp_path, method):
    root = Path(tempfile.mkdtemp(prefix=f"{PREFIX}0-", dir="/tmp"))
    engine_dir = root / "1"
    engine_dir.mkdir()
    script = tmp_path / "stub.py"
    script.write_text(STUB.format(root=str(ROOT), engine_dir=str(engine_dir),
                                  method=method))
    stub = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        child = psutil.Process(int(stub.stdout.readline()))
        time.sleep(1.0)  # the child is up (a spawned one imports first)
        assert child.is_running() and child.status() != psutil.STATUS_ZOMBIE
        os.kill(stub.pid, signal.SIGKILL)
        stub.wait(10)
        deadline = time.monotonic() + 10
        while child.is_running() and child.status() != psutil.STATUS_ZOMBIE:
            assert time.monotonic() < deadline, "the child outlived its stub"
            time.sleep(0.05)
        assert not root.exists()
    finally:
        if stub.poll() is None:
            stub.kill()
        for p in psutil.Process().children(recursive=True):
            p.kill()
