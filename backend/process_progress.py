"""Whether the engine is alive but short of CPU: the kernel's per-thread scheduler statistics.

A probe of an idle engine that gets no answer in time means one of two things. On a busy machine (another model
loading beside this one, a compile, a noisy neighbour) the engine's threads are runnable and wait for a core, or run
slowly: the kernel counts both, per thread, in /proc/<pid>/task/<tid>/schedstat (time on a CPU, time waiting on a
run queue). A hung engine — stopped (SIGSTOP), deadlocked, blocked for good — neither runs nor waits for a CPU:
both numbers stand still. The sum over the threads that answer a probe (every thread of the EngineCore processes)
tells the two apart. (An EngineCore whose busy loop hangs while its input thread still receives the probe shows
progress: it is caught by the probe's outer bound, HEALTH_STALL_TIMEOUT_S.)

Where schedstat is missing (a kernel without CONFIG_SCHED_INFO), CPU time alone is used (psutil): a starved
engine then still shows the little CPU it gets.
"""

from __future__ import annotations

from pathlib import Path

import psutil  # a dependency of vLLM, so present wherever the backend runs


def _schedstat_s(task: Path) -> float | None:
    try:
        running_ns, waiting_ns, _ = (task / "schedstat").read_text().split()
    except (OSError, ValueError):
        return None
    return (int(running_ns) + int(waiting_ns)) / 1e9


def process_progress_s(pid: int) -> float:
    """Seconds all threads of a process have run or waited for a CPU (0 when it is gone)."""
    total, measured = 0.0, False
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return 0.0
    for task in tasks:
        seconds = _schedstat_s(task)
        if seconds is not None:
            total, measured = total + seconds, True
    if measured:
        return total
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return times.user + times.system
