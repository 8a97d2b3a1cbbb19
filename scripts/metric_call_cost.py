"""What one Triton custom-metric call costs from a Python model, and whether it holds the GIL.

The publisher's design (metrics/publisher.py) rests on these numbers, so they are measured, not assumed: a plain
Python model (no vLLM) on a real tritonserver times N calls of each kind — histogram `observe()`, counter
`increment()`, gauge `set()` and gauge `increment()` — in wall and CPU time, and counts how fast a pure-Python
thread spins meanwhile: a call that keeps the GIL for its IPC round trip slows that thread (as it would slow vLLM's
event loop), a call that releases it does not.

    .venv/bin/python scripts/metric_call_cost.py [--calls 5000]

Prints JSON (also written to .bench/metric-call-cost.json). docs/benchmarks.md has the results.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from triton_launcher import TritonServer  # noqa: E402

CONFIG = """name: "cost"
backend: "python"
max_batch_size: 0
input [{ name: "IN", data_type: TYPE_FP32, dims: [1] }]
output [{ name: "OUT", data_type: TYPE_FP32, dims: [1] }]
instance_group [{ kind: KIND_CPU, count: 1 }]
"""

MODEL = '''
import json, threading, time
import triton_python_backend_utils as pb_utils

CALLS, RESULT = {calls}, {result!r}


def spin_rate(call, n):
    """Iterations per second of a pure-Python loop on another thread while `call` runs n times."""
    stop, count = threading.Event(), []
    def spin():
        i = 0
        while not stop.is_set():
            i += 1
        count.append(i)
    thread = threading.Thread(target=spin)
    thread.start()
    began = time.perf_counter()
    for _ in range(n):
        call()
    elapsed = time.perf_counter() - began
    stop.set()
    thread.join()
    return count[0] / elapsed


def timed(call, n):
    wall, cpu = time.perf_counter(), time.thread_time()
    for _ in range(n):
        call()
    return {{"wall_us": (time.perf_counter() - wall) / n * 1e6, "cpu_us": (time.thread_time() - cpu) / n * 1e6}}


class TritonPythonModel:
    def initialize(self, args):
        family = pb_utils.MetricFamily
        self.families = [family(name="cost_h", description="h", kind=family.HISTOGRAM),
                         family(name="cost_c", description="c", kind=family.COUNTER),
                         family(name="cost_g", description="g", kind=family.GAUGE)]
        h = self.families[0].Metric(labels={{"a": "b"}}, buckets=[0.01, 0.1, 1.0])
        c = self.families[1].Metric(labels={{"a": "b"}})
        g = self.families[2].Metric(labels={{"a": "b"}})
        self.metrics = (h, c, g)
        calls = {{"histogram observe": lambda: h.observe(0.05), "counter increment": lambda: c.increment(1),
                  "gauge set": lambda: g.set(3.0), "gauge increment": lambda: g.increment(-0.5)}}
        idle = spin_rate(lambda: time.sleep(0.0001), CALLS // 2)
        result = {{"calls": CALLS, "spin_rate_idle": idle}}
        for name, call in calls.items():
            result[name] = {{**timed(call, CALLS), "spinner_rate_vs_idle": spin_rate(call, CALLS) / idle}}
        with open(RESULT, "w") as f:
            json.dump(result, f, indent=1)

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", r.get_input_tensor_by_name("IN").as_numpy())])
                for r in requests]
'''


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=5000)
    parser.add_argument("--output", default=str(ROOT / ".bench" / "metric-call-cost.json"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="metric-cost-") as tmp:
        result = Path(tmp) / "result.json"
        model = Path(tmp) / "repo" / "cost"
        (model / "1").mkdir(parents=True)
        (model / "config.pbtxt").write_text(CONFIG)
        (model / "1" / "model.py").write_text(MODEL.format(calls=args.calls, result=str(result)))
        with TritonServer(model.parent) as server:
            server.wait_ready(timeout=300)
            deadline = time.monotonic() + 60
            while not result.exists() and time.monotonic() < deadline:
                time.sleep(0.2)
        text = result.read_text()
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
