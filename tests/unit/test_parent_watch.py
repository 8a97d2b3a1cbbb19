"""ParentWatch's pure part: which shared-memory region is the stub's (the rest is tested against a real server)."""

from pathlib import Path

from vllm_triton_observable.backend.parent_watch import stub_region


def test_the_stub_region_is_the_second_argument_of_tritons_stub():
    argv = ["/opt/tritonserver/backends/python/triton_python_backend_stub", "/models/m/1/model.py",
            "triton_python_backend_shm_region_0b6c", "1048576", "1048576", "42"]
    assert stub_region(argv) == Path("/dev/shm/triton_python_backend_shm_region_0b6c")
    assert stub_region(["python", "model.py", "region"]) is None  # not Triton's stub: nothing to clean up
    assert stub_region([argv[0], argv[1], "../etc/passwd"]) is None
    assert stub_region(argv[:2]) is None


def test_the_wait_returns_the_process_that_ended_first():
    import subprocess
    import sys

    from vllm_triton_observable.backend.parent_watch import wait_for_exit

    long, short = (subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({s})"]) for s in (60, 0.3))
    try:
        assert wait_for_exit(long.pid, short.pid) == short.pid
    finally:
        long.kill()
        long.wait()
        short.wait()


def test_the_watch_process_kills_a_stub_that_outlives_its_server(tmp_path):
    """The real launch (a fresh interpreter importing the module by name) with stand-ins for the server and a
    stub that never exits: once the server ends, the stub is killed after its grace and the watch ends."""
    import subprocess
    import sys
    import time

    from vllm_triton_observable.backend import parent_watch
    from vllm_triton_observable.common.helper_process import helper_command

    server, stub = (subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"]) for _ in range(2))
    ipc = tmp_path / "ipc"
    ipc.mkdir()
    watch = subprocess.Popen(helper_command(parent_watch.__name__, [str(server.pid), str(stub.pid), "", str(ipc)]),
                             stderr=subprocess.PIPE, text=True, cwd=tmp_path)  # not where the package is
    try:
        time.sleep(1.0)
        assert watch.poll() is None and stub.poll() is None  # both alive: the watch waits
        server.kill()
        server.wait()
        began = time.monotonic()
        assert stub.wait(parent_watch.STUB_EXIT_GRACE_S + 5) == -9
        assert time.monotonic() - began >= parent_watch.STUB_EXIT_GRACE_S - 0.5
        assert watch.wait(10) == 0
        assert not ipc.exists()
        assert "had not exited 5 s after its server: killed it" in watch.stderr.read()
    finally:
        for process in (server, stub, watch):
            process.kill()
            process.wait()
