"""make profile: where the Triton path spends its CPU per token, under the benchmark's streaming load.

One tritonserver serves the benchmark's metrics-on model (or, with --target vllm-serve, `vllm serve` the same
engine, for the same measurements of its API server); the benchmark's client (Triton's HTTP generate_stream over
SSE, or gRPC streaming; vLLM's /v1/completions over SSE) sends rounds of N streams × T tokens back to back. Over
one window of that steady load it measures, per token:
  * the CPU time of every process (client, tritonserver, stub, EngineCore, worker) and the context switches of
    every thread (a response that crosses a process or a thread costs a wake-up and a switch),
  * with `perf` (when installed): tritonserver's and the stub's CPU by shared object and by symbol — the kernel,
    libc, libpython, Triton's libraries,
  * with `py-spy --gil`: the stub's (the API server's) Python work by function (the thread holding the GIL is the
    one running Python), grouped by where the code lives: this backend, its metrics, vLLM, pb_utils, the rest.
Prints the tables for docs/benchmarks.md and writes JSON (default .bench/profile.json).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

import bench  # noqa: E402
from triton_launcher import TritonServer, write_model  # noqa: E402

MODEL = "bench_c"
PY_SPY_RATE = 250  # samples per second
# Where a Python frame's code lives, first match wins: the stub's Python work by owner.
PYTHON_OWNERS = (("vllm_triton_observable/backend", "backend (requests, responses)"),
                 ("vllm_triton_observable/metrics", "backend (metrics)"),
                 ("vllm_triton_observable", "backend (other)"),
                 ("triton_python_backend_utils", "pb_utils"),
                 ("vllm/entrypoints", "vLLM's API server (OpenAI protocol)"),
                 ("vllm/", "vLLM (output processing, detokenizer, stats)"),
                 *((f"{web}/", "HTTP (uvicorn, starlette, fastapi)") for web in ("uvicorn", "starlette", "fastapi")),
                 ("pydantic", "pydantic"),
                 ("prometheus_client", "prometheus_client (vLLM's and the backend's metric objects)"),
                 ("zmq/", "ZeroMQ (engine IPC)"),
                 ("asyncio/", "asyncio"))


class Load(threading.Thread):
    """Rounds of the benchmark's streaming workload, back to back, on a loop of its own; `tokens` counts every
    token received so far, so a window's tokens are a difference of two readings."""

    def __init__(self, server: Any, protocol: str, concurrency: int, tokens: int, traced: bool) -> None:
        super().__init__(daemon=True)
        self.server, self.protocol, self.concurrency, self.max_tokens = server, protocol, concurrency, tokens
        self.traced = traced  # every request with a traceparent (the server traces exactly those)
        self.finished_tokens, self.current, self.rounds = 0, bench.Run(), 0
        self.stop = threading.Event()

    @property
    def tokens(self) -> int:
        return self.finished_tokens + self.current.tokens

    def run(self) -> None:
        loop = asyncio.new_event_loop()
        try:
            while not self.stop.is_set():
                self.current = loop.run_until_complete(self._round())
                self.finished_tokens += self.current.tokens
                self.current, self.rounds = bench.Run(), self.rounds + 1
        finally:
            loop.run_until_complete(bench.close_http_session())
            loop.close()

    async def _round(self) -> bench.Run:
        """One round whose Run is visible while it streams."""
        if isinstance(self.server, bench.VllmServe):
            return await bench.vllm_serve_round(self.server, self.concurrency, self.max_tokens, run=self.current)
        if self.protocol == "http":
            return await bench.triton_http_round(self.server, MODEL, self.concurrency, self.max_tokens,
                                                 run=self.current, traced=self.traced)
        return await bench.triton_round(self.server, MODEL, self.concurrency, self.max_tokens, scrape=False,
                                        run=self.current, traced=self.traced)


# -- what the kernel counts: CPU time and context switches -----------------------------------------------
def thread_counters(pid: int) -> dict[int, tuple[int, int]]:
    """Voluntary and involuntary context switches per thread. psutil reads only the main thread's
    (/proc/<pid>/status), so each thread's own status file is read."""
    counters = {}
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            fields = dict(line.split(":", 1) for line in (task / "status").read_text().splitlines() if ":" in line)
            counters[int(task.name)] = (int(fields["voluntary_ctxt_switches"]),
                                        int(fields["nonvoluntary_ctxt_switches"]))
        except (OSError, KeyError, ValueError):
            continue
    return counters


def snapshot(processes: dict[str, int]) -> dict[str, dict]:
    found = {}
    for name, pid in processes.items():
        try:
            times = psutil.Process(pid).cpu_times()
        except psutil.Error:
            continue
        found[name] = {"cpu_s": times.user + times.system, "threads": thread_counters(pid)}
    return found


def per_token(before: dict, after: dict, tokens: int) -> dict[str, dict]:
    """CPU ms, context switches and the busiest thread's switches, per token, per process."""
    result = {}
    for name, end in after.items():
        start = before.get(name)
        if start is None:
            continue
        switched = [(end["threads"][tid][0] - v0, end["threads"][tid][1] - i0)
                    for tid, (v0, i0) in start["threads"].items() if tid in end["threads"]]
        result[name] = {
            "cpu_ms": 1000 * (end["cpu_s"] - start["cpu_s"]) / tokens,
            "voluntary_switches": sum(v for v, _ in switched) / tokens,
            "involuntary_switches": sum(i for _, i in switched) / tokens,
            "threads_switching": sum(1 for v, _ in switched if v > tokens / 100),
        }
    return result


# -- samplers -------------------------------------------------------------------------------------------
def start_perf(pid: int, seconds: float, output: Path) -> subprocess.Popen | None:
    perf = shutil.which("perf")
    if perf is None:
        return None
    return subprocess.Popen([perf, "record", "-F", "499", "-p", str(pid), "-o", str(output), "--", "sleep",
                             str(seconds)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def perf_shares(data: Path, sort: str, top: int) -> list[tuple[str, float]]:
    """(shared object or symbol, share of the samples) from `perf report`."""
    text = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "--sort", sort, "--stdio",
                           "-g", "none", "-q"], capture_output=True, text=True).stdout
    rows = []
    for line in text.splitlines():
        match = re.match(r"\s*([\d.]+)%\s+(.+?)\s*$", line)
        if match:
            rows.append((match.group(2), float(match.group(1)) / 100))
    return rows[:top]


def py_spy_path() -> str | None:
    """py-spy on the PATH, else beside this interpreter (the project's venv); None where it is not installed."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return py_spy if Path(py_spy).exists() else None


def start_py_spy(pid: int, seconds: float, output: Path) -> subprocess.Popen | None:
    py_spy = py_spy_path()
    if py_spy is None:
        return None
    return subprocess.Popen([py_spy, "record", "-p", str(pid), "--gil", "--nonblocking", "-r", str(PY_SPY_RATE),
                             "-d", str(int(seconds)), "--format", "raw", "-o", str(output)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def python_breakdown(folded: Path) -> tuple[int, collections.Counter, collections.Counter]:
    """Samples in total, by owner of the innermost frame, and by innermost function."""
    owners: collections.Counter = collections.Counter()
    functions: collections.Counter = collections.Counter()
    total = 0
    for line in folded.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        leaf = re.sub(r":\d+\)$", ")", stack.split(";")[-1])
        n = int(count)
        total += n
        functions[leaf] += n
        owners[next((owner for marker, owner in PYTHON_OWNERS if marker in leaf), "other (threading, queue, …)")] += n
    return total, owners, functions


# -- orchestration -------------------------------------------------------------------------------------
def processes_of(server: Any) -> dict[str, int]:
    found = {"client": psutil.Process().pid}
    if isinstance(server, bench.VllmServe):
        found["API server"] = top = server.process.pid
    else:
        found["tritonserver"] = server.process.pid
        top = next(iter(bench.stubs_of(server.process.pid, MODEL)), None)
    for pid in bench.process_tree(top) if top else []:
        name = bench.role(psutil.Process(pid))
        if name in ("stub", "EngineCore", "worker"):  # not multiprocessing's resource tracker
            found.setdefault(name, pid)
    return found


def report(profile: dict) -> str:
    tokens = profile["tokens"]
    lines = [f"{tokens:,} tokens in {profile['seconds']:.0f} s ({tokens / profile['seconds']:,.0f} tokens/s), "
             f"{profile['target']} over {profile['protocol']}{', every request traced' if profile['traced'] else ''}, "
             f"{profile['concurrency']} streams × {profile['max_tokens']} tokens", "",
             "| process | CPU ms / token | voluntary switches / token | involuntary / token | threads switching |",
             "|---|---|---|---|---|"]
    for name, row in profile["processes"].items():
        lines.append(f"| {name} | {row['cpu_ms']:.3f} | {row['voluntary_switches']:.2f} | "
                     f"{row['involuntary_switches']:.2f} | {row['threads_switching']} |")
    for name, native in profile.get("native", {}).items():
        cpu = profile["processes"][name]["cpu_ms"]
        lines += ["", f"{name}, by shared object (perf; ms / token):", ""]
        lines += [f"  {share * cpu:.3f}  {share:6.1%}  {dso}" for dso, share in native["dso"]]
        lines += ["", f"{name}, top symbols:", ""]
        lines += [f"  {share * cpu:.3f}  {share:6.1%}  {symbol[:110]}" for symbol, share in native["symbols"]]
    python = profile.get("python")
    if python:
        per_sample = 1000 / PY_SPY_RATE / tokens  # ms of GIL-held time per token that one sample stands for
        lines += ["", f"{python['process']}, Python holding the GIL (py-spy --gil; "
                  f"{python['total'] * per_sample:.3f} ms / token):", ""]
        lines += [f"  {n * per_sample:.3f}  {n / python['total']:6.1%}  {owner}" for owner, n in python["owners"]]
        lines += ["", f"{python['process']}, top Python functions (self):", ""]
        lines += [f"  {n * per_sample:.3f}  {n / python['total']:6.1%}  {name}" for name, n in python["functions"]]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", choices=("triton", "vllm-serve"), default="triton")
    parser.add_argument("--protocol", choices=("http", "grpc"), default="http", help="Triton's (vllm serve: http)")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--seconds", type=float, default=20.0, help="length of the measured window")
    parser.add_argument("--trace", action="store_true",
                        help="trace every request (Triton, this backend and vLLM export OTLP to a discarding sink)")
    parser.add_argument("--engine-args", type=bench.engine_args, default={},
                        help="JSON merged into the model's model.json (e.g. '{\"stream_interval\": 4}')")
    parser.add_argument("--output", default=str(ROOT / ".bench" / "profile.json"))
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="profile-") as tmp:
        repository = Path(tmp) / "models"
        write_model(repository, MODEL, {**bench.ENGINE, **args.engine_args},
                    params={"REPORT_CUSTOM_METRICS": "true"})
        sink, sink_url = bench.start_sink() if args.trace else (None, "")
        if args.target == "vllm-serve":
            bench.say("starting vllm serve with the benchmark's engine (≈ 1 min)")
            bench.ENGINE.update(args.engine_args)
            server: Any = bench.VllmServe(ROOT / ".build" / "profile-vllm-serve.log",
                                          otlp_traces_endpoint=sink_url or None).start()
        else:
            bench.say("starting tritonserver with the benchmark's metrics-on model (≈ 1 min)")
            server = TritonServer(repository, extra_args=bench.tracing_args(sink_url) if args.trace else [],
                                  log_path=ROOT / ".build" / "profile-tritonserver.log").start()
        load = Load(server, args.protocol, args.concurrency, args.tokens, traced=args.trace)
        try:
            server.wait_ready(timeout=900)
            load.start()
            while load.rounds < 2:  # warm-up: the engine's first steps and the client's connections
                if not load.is_alive():
                    raise RuntimeError(f"the load stopped during warm-up; see {server.log_path}")
                time.sleep(0.2)
            processes = processes_of(server)
            bench.say(f"profiling {args.seconds:g} s of steady load: {', '.join(processes)}")
            front = "stub" if "stub" in processes else "API server"  # where the server's Python runs
            native_files = {name: Path(tmp) / f"{name}.perf" for name in ("tritonserver", front) if name in processes}
            samplers = [start_perf(processes[name], args.seconds, path) for name, path in native_files.items()]
            folded = Path(tmp) / "python.folded"
            samplers.append(start_py_spy(processes[front], args.seconds, folded))
            before, tokens_before, began = snapshot(processes), load.tokens, time.monotonic()
            time.sleep(args.seconds)
            after, tokens, seconds = snapshot(processes), load.tokens - tokens_before, time.monotonic() - began
            for sampler in samplers:
                if sampler is not None:
                    sampler.wait(60)
            load.stop.set()
            load.join(120)
            profile: dict[str, Any] = {"target": args.target,
                                       "protocol": "http" if args.target == "vllm-serve" else args.protocol,
                                       "traced": args.trace, "concurrency": args.concurrency,
                                       "max_tokens": args.tokens, "engine_args": args.engine_args,
                                       "tokens": tokens, "seconds": seconds,
                                       "processes": per_token(before, after, tokens)}
            if all(path.exists() for path in native_files.values()):
                profile["native"] = {name: {"dso": perf_shares(path, "dso", 8), "symbols": perf_shares(path, "sym", 12)}
                                     for name, path in native_files.items()}
            else:
                bench.say("perf is not installed: no per-library split (Debian: apt install linux-perf)")
            if folded.exists():
                total, owners, functions = python_breakdown(folded)
                profile["python"] = {"process": front, "total": total, "owners": owners.most_common(),
                                     "functions": functions.most_common(15)}
        finally:
            load.stop.set()
            server.stop()
            if sink is not None:
                sink.terminate()
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(profile, indent=2))
    print()
    print(report(profile))
    print()
    bench.say(f"JSON written to {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
