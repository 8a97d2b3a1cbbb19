"""What a killed process leaves in /dev/shm is found while it runs and unlinked after (real processes, no vLLM)."""

import signal
import subprocess
import sys
from pathlib import Path

from vllm_triton_observable.backend.engine_shm import mapped_segments, unlink_left_behind

HOLDER = """
import sys, time
from multiprocessing import resource_tracker, shared_memory
segment = shared_memory.SharedMemory(create=True, size=4096)
resource_tracker.unregister(segment._name, "shared_memory")  # as if its tracker outlived it (the stub's does)
print(segment.name, flush=True)
time.sleep(60)
"""


def test_a_killed_processes_segment_is_found_and_unlinked_and_ours_are_kept():
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdout=subprocess.PIPE, text=True)
    try:
        name = holder.stdout.readline().strip()
        found = mapped_segments([holder.pid])
        assert name in found
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
    assert (Path("/dev/shm") / name).exists()  # nobody unlinked it
    assert unlink_left_behind(found | {"no-such-segment"}) == [name]
    assert not (Path("/dev/shm") / name).exists()
    assert mapped_segments([holder.pid]) == set()  # a process that is gone maps nothing
