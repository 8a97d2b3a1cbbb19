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
