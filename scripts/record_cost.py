"""What vLLM's stat logger costs on vLLM's event loop per engine step: vLLM's own `PrometheusStatLogger` against
this backend's (the same logger, its metric classes swapped for the instance registry's).

vLLM calls every stat logger once per engine step inside its output handler, so a step's `record()` is on the serial
path of every stream's next token; with N streams in the step it observes N inter-token latencies. Both loggers are
built from the benchmark's engine configuration (no engine is started) and record the same steps, each with a
step's scheduler stats and N generated tokens; each is checked to have counted every one of them.

    .venv/bin/python scripts/record_cost.py [--streams 64,256] [--steps 50] [--repeat 10] [--output F]

Prints JSON (also written to .bench/record-cost.json): per stream count and logger the median µs per step and per
token. docs/benchmarks.md ("Metrics: what publishing costs") has the results.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "scripts"), str(ROOT)]

from engine_settings import TINY_MODEL, engine_for  # noqa: E402


def loggers() -> dict[str, Any]:
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.metrics.loggers import PrometheusStatLogger

    from vllm_triton_observable.metrics.registry import InstanceRegistry
    from vllm_triton_observable.metrics.stat_logger import stat_logger_class

    config = AsyncEngineArgs(**engine_for("bench"), disable_log_stats=False).create_engine_config(
        UsageContext.OPENAI_API_SERVER)
    return {"vllm": PrometheusStatLogger(config),
            "backend": stat_logger_class(InstanceRegistry({"model": "record_cost"}))(config)}


def steps(streams: int, count: int) -> list[tuple[Any, Any]]:
    from vllm.v1.metrics.stats import IterationStats, SchedulerStats

    made = []
    for _ in range(count):
        iteration = IterationStats()
        iteration.num_generation_tokens = streams
        iteration.inter_token_latencies_iter = [random.uniform(0.004, 0.02) for _ in range(streams)]
        made.append((SchedulerStats(num_running_reqs=streams), iteration))
    return made


def observed(logger: Any) -> float:
    """How many inter-token latencies the logger's histogram holds, as its exposition says."""
    (family,) = logger.histogram_inter_token_latency[0].collect()
    return next(s.value for s in family.samples if s.name.endswith("_count"))


def measure(streams: list[int], count: int, repeat: int) -> dict[str, Any]:
    made = loggers()
    result: dict[str, Any] = {}
    for n in streams:
        recorded = steps(n, count)
        before = {name: observed(logger) for name, logger in made.items()}
        times: dict[str, list[float]] = {name: [] for name in made}
        for _ in range(repeat):
            for name, logger in made.items():  # interleaved, so that a noisy spell hits both
                start = time.perf_counter()
                for scheduler, iteration in recorded:
                    logger.record(scheduler, iteration)
                times[name].append((time.perf_counter() - start) / count * 1e6)
        for name, logger in made.items():
            if observed(logger) - before[name] != n * count * repeat:
                raise SystemExit(f"the {name} logger did not count every inter-token latency it was given")
            per_step = statistics.median(times[name])
            result.setdefault(str(n), {})[name] = {"us_per_step": round(per_step, 1),
                                                   "us_per_token": round(per_step / n, 3)}
    return result


def main() -> None:
    if not (TINY_MODEL / "config.json").exists():
        raise SystemExit(f"no tiny model at {TINY_MODEL.relative_to(ROOT)}: `bash scripts/setup.sh` builds it")
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", default="64,256", help="generated tokens (streams) per step, comma-separated")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--output", default=str(ROOT / ".bench" / "record-cost.json"))
    args = parser.parse_args()
    result = measure([int(n) for n in args.streams.split(",")], args.steps, args.repeat)
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
