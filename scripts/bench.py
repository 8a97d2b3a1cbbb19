"""make bench: the same streaming workload through vLLM's own server, bare AsyncLLM and Triton with this backend.

Configurations, run in interleaved rounds that alternate direction (v h a b c …, then … c b a h v) so that machine
drift, and whatever the configuration before leaves behind, hits each one from both sides:
  v  `vllm serve` (vLLM's OpenAI-compatible server, same engine arguments), /v1/completions streamed (SSE)
  h  tritonserver + this backend, metrics on, Triton's HTTP generate_stream (SSE), the same SSE client as v
  a  vLLM's AsyncLLM directly, in this process: the engine's own limit, no server and no client
  x  b's twin: another model of b's server with b's configuration, measured just before b (an A/A pair: how far
     two identical models of one server differ, the floor under every between-model ratio)
  b  tritonserver + this backend, metrics off, gRPC streaming (tritonclient's asyncio client)
  c  metrics on (REPORT_CUSTOM_METRICS), gRPC streaming
  d  metrics and the health monitor on, gRPC streaming
  e  metrics on, and every request traced (Triton, this backend and vLLM export OTLP spans to a sink)
  f  e's model, requests not traced: e's partner for tracing_on_over_off
  k  h with the EngineCore forked from the stub (VLLM_WORKER_MULTIPROC_METHOD=fork, a tritonserver of its own):
     vLLM's default on a GPU, and the backend's until it spawned the EngineCore as vllm serve does
  g  metrics on with PER_TOKEN_HISTOGRAMS "histogram" (the per-token histograms replayed as Triton histograms,
     one observe() per token), gRPC streaming: c's partner for per_token_histograms_over_series
x, b, c, d, g are models of one tritonserver and h is c's model over HTTP. e and f run on a second tritonserver
in OpenTelemetry mode with `rate=0`, which traces exactly the requests that carry a W3C `traceparent`: e sends a
new one with every request, f none (the header is forwarded to the backend too, which traces those whose context
Triton's gRPC frontend loses). So tracing is measured on one engine, one model and one server, traced and
not, round by round (two servers of the same configuration differ by up to ± 3 % in a long run: their engines do
not run alike), and b, c, d build no tracer at all. A model is idle while another is measured, and each
measurement starts after a short settle (vLLM's workers busy-poll for a second after work). Per round it also
records the CPU seconds of every process involved, by role (client, API server or stub, tritonserver, EngineCore,
worker), per token.
Prints a table and writes JSON (default .bench/latest.json). Options: see --help (or BENCH_ARGS for make).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from engine_settings import engine_for  # noqa: E402
from triton_launcher import TritonServer, free_port, write_model  # noqa: E402

# The tiny model's engine arguments on this device (scripts/engine_settings.py); --model and --engine-args change
# them, for every configuration alike.
ENGINE = engine_for("bench")
CONFIGS = {  # key: (label, the Triton model's config.pbtxt parameters, or None when it is not a Triton model)
    "v": ("vllm serve, HTTP SSE", None),
    "h": ("Triton HTTP SSE, metrics on", None),  # model bench_c
    "a": ("direct AsyncLLM", None),
    "x": ("Triton, metrics off, b's twin", {}),  # an A/A pair with b: what the instrument resolves
    "b": ("Triton, metrics off", {}),
    "c": ("Triton, metrics on", {"REPORT_CUSTOM_METRICS": "true"}),
    "d": ("Triton, metrics + health", {"REPORT_CUSTOM_METRICS": "true", "ENABLE_VLLM_HEALTH_CHECK": "true"}),
    "e": ("Triton, metrics + tracing", {"REPORT_CUSTOM_METRICS": "true"}),
    "f": ("Triton, metrics, untraced beside e", None),  # model bench_e, no traceparent
    "g": ("Triton, metrics on, per-token histograms native",
          {"REPORT_CUSTOM_METRICS": "true", "PER_TOKEN_HISTOGRAMS": "histogram"}),
    "k": ("Triton HTTP SSE, metrics on, the EngineCore forked from the stub", {"REPORT_CUSTOM_METRICS": "true"}),
    "p": ("Triton HTTP SSE, metrics on, 4 response threads",
          {"REPORT_CUSTOM_METRICS": "true", "RESPONSE_THREADS": "4"}),
    "q": ("Triton HTTP SSE, metrics on, batched admission", {"REPORT_CUSTOM_METRICS": "true"}),
    "s": ("Triton HTTP SSE, metrics on, GIL switch interval 0.5 ms",
          {"REPORT_CUSTOM_METRICS": "true", "GIL_SWITCH_INTERVAL_MS": "0.5"}),
    "t": ("Triton HTTP SSE, metrics on, GIL switch interval 5 ms (Python's, fixed)",
          {"REPORT_CUSTOM_METRICS": "true", "GIL_SWITCH_INTERVAL_MS": "5"}),
    "m": ("Triton HTTP SSE, metrics on, 2 instances sharing one engine",
          {"REPORT_CUSTOM_METRICS": "true", "SHARED_ENGINE": "true"}),
    "n": ("Triton HTTP SSE, metrics on, 4 instances sharing one engine",
          {"REPORT_CUSTOM_METRICS": "true", "SHARED_ENGINE": "true"}),
    "r": ("Triton HTTP SSE, metrics on, 4 instances sharing one engine, batched admission",
          {"REPORT_CUSTOM_METRICS": "true", "SHARED_ENGINE": "true"}),
    "w": ("Triton HTTP SSE, metrics on, 2 instances sharing one engine, batched admission",
          {"REPORT_CUSTOM_METRICS": "true", "SHARED_ENGINE": "true"}),
}
# What `make bench` runs unless --configs says: vllm serve, Triton HTTP, the bare engine and the switches on / off
# (the others are experiments, each named when wanted: all of them at once would be ≈ 16 engines, past this
# project's machines' memory)
DEFAULT_CONFIGS = ("v", "h", "a", "b", "c", "d", "e", "f")
# Batched admission (docs/serving.md): config.pbtxt's max_batch_size; the HTTP generate endpoints need no change
BATCHED_ADMISSION = {"q": 256, "r": 256, "w": 256}
INSTANCES = {"m": 2, "n": 4, "r": 4, "w": 2}  # instance_group count (SHARED_ENGINE: front ends of the one engine)
# Measured with the HTTP SSE client (the others with gRPC streaming)
HTTP_CLIENT = {"h", "k", "p", "q", "s", "t", "m", "n", "r", "w"}
METRICS_ON = {"c", "d", "e", "f", "g"}  # scraped while measured; their publish cost is read per round
# Read from the stub's own families after each round (its publisher's cost, its response threads' time behind)
COUNTED = METRICS_ON | HTTP_CLIENT
TRACED = {"e", "f"}  # served by the tritonserver in OpenTelemetry mode
# served by a tritonserver whose stubs fork their EngineCore (the backend spawns it unless the environment says)
FORKED = {"k"}
FORK_ENGINE = {"VLLM_WORKER_MULTIPROC_METHOD": "fork"}
# how long an idle connection of the clients' HTTP session stays open: longer than every other configuration's
# round and settle together, so that each round finds its connections from the round before
HTTP_KEEPALIVE_S = 600.0
SAME_MODEL = {"h": "c", "f": "e"}  # configurations that measure another's model (another client, or untraced)
PROMPT = "Benchmark request {i}: the quick brown fox jumps over the lazy dog while the server streams tokens."
# --prompt-words (set by main, as --engine-args sets ENGINE): words added to every prompt, for prefill-heavy runs
WORKLOAD = {"prompt_words": 0}
FILLER = ("river", "stone", "garden", "window", "planet", "signal", "morning", "paper", "engine", "forest",
          "bridge", "candle", "mirror", "harbor", "valley", "thunder")


def prompt(i: int) -> str:
    """Request i's prompt: PROMPT; with --prompt-words, behind a fresh nonce, so that no request shares more than
    its first tokens with any other of any round (vLLM's prefix cache would otherwise prefill later rounds from
    memory), and followed by that many words."""
    words = WORKLOAD["prompt_words"]
    if not words:
        return PROMPT.format(i=i)
    filler = " ".join(FILLER[(i + k) % len(FILLER)] for k in range(words))
    return f"{uuid.uuid4().hex[:12]} {PROMPT.format(i=i)} {filler}"


@dataclass
class Run:
    """One configuration in one round."""

    tokens: int = 0
    seconds: float = 0.0
    ttft: list[float] = field(default_factory=list)
    itl: list[float] = field(default_factory=list)
    scrape: list[float] = field(default_factory=list)
    peak_rss_mib: float = 0.0
    cpu_s: dict[str, float] = field(default_factory=dict)  # CPU seconds per process name, client included
    publish: dict[str, float] = field(default_factory=dict)  # the metrics publisher's cost in the round
    errors: int = 0
    responses: int = 0  # responses (SSE events, engine outputs) that carried tokens
    engine_step_ms: float | None = None  # the engine's pace, from vLLM's own decode times (engine_pace)

    @property
    def cpu_ms_per_token(self) -> float:
        return 1000 * sum(self.cpu_s.values()) / self.tokens if self.tokens else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds else 0.0

    @property
    def last_first_token_s(self) -> float | None:
        """When the last stream had its first token: every stream starts with the round, so until then the engine
        ran fewer than all of them. The rest of the round is the streams' decoding, paced by the engine's steps."""
        return max(self.ttft) if self.ttft else None


class StreamTimer:
    """Client-side timing of one streamed request: TTFT, then per-token gaps (a response may carry several)."""

    def __init__(self, run: Run) -> None:
        self.run, self.start, self.last, self.first = run, time.perf_counter(), 0.0, True

    def tokens(self, n: int) -> None:
        if not n:
            return
        now = time.perf_counter()
        if self.first:
            self.run.ttft.append(now - self.start)
            self.first = False
        else:
            self.run.itl.extend([(now - self.last) / n] * n)
        self.last = now
        self.run.tokens += n
        self.run.responses += 1


def say(message: str) -> None:
    print(f"\033[1m[bench]\033[0m {message}", flush=True)


# -- processes and memory ----------------------------------------------------------------------------
def _rss_mib(pid: int) -> float:
    try:
        return psutil.Process(pid).memory_info().rss / 2**20
    except psutil.Error:
        return 0.0


def process_tree(pid: int) -> list[int]:
    try:
        root = psutil.Process(pid)
        return [root.pid, *(child.pid for child in root.children(recursive=True))]
    except psutil.Error:
        return []


def stubs_of(server_pid: int, model: str) -> list[int]:
    """The model's stub processes: one per instance (SHARED_ENGINE: the engine is the child of one of them)."""
    found = []
    for child in psutil.Process(server_pid).children():
        try:
            if f"/{model}/1/model.py" in " ".join(child.cmdline()):
                found.append(child.pid)
        except psutil.Error:
            continue
    return found


def config_pids(key: str, servers: dict[str, TritonServer]) -> list[int]:
    """The processes a configuration uses: this process and its engine (a), or tritonserver plus the model's
    stubs, EngineCore and worker (b–e). Found once per round: walking the process table while measuring costs CPU
    and the GIL."""
    if key == "a":
        skip = {p for server in servers.values() for p in process_tree(server.process.pid)}
        return [p for p in process_tree(os.getpid()) if p not in skip]
    if key == "v":
        return process_tree(servers["vllm"].process.pid)
    server = servers[server_of(key)]
    stubs = stubs_of(server.process.pid, f"bench_{model_of(key)}")
    return [server.process.pid] + [pid for stub in stubs for pid in process_tree(stub)]


ROLES = (("VLLM::EngineCore", "EngineCore"), ("VLLM::Worker", "worker"), ("triton_python_backend_stub", "stub"),
         ("tritonserver", "tritonserver"), ("vllm.entrypoints", "API server"),
         # the stub's helpers: its spans' exporter (its batches land up to 0.5 s after their requests, so mostly
         # outside a round's window) and its parent watch
         ("tracing.export_process", "span exporter"), ("parent_watch", "parent watch"))


def role(process: psutil.Process) -> str:
    """What a process is to the benchmark: the client (this process), or its part of the server."""
    if process.pid == os.getpid():
        return "client"
    command = " ".join(process.cmdline())
    return next((name for marker, name in ROLES if marker in command), process.name())


def cpu_seconds(pids: list[int]) -> dict[int, tuple[str, float]]:
    """user + system CPU seconds and role, per pid."""
    found = {}
    for pid in pids:
        try:
            process = psutil.Process(pid)
            times = process.cpu_times()
            found[pid] = (role(process), times.user + times.system)
        except psutil.Error:
            continue
    return found


def cpu_used(before: dict[int, tuple[str, float]], after: dict[int, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds spent between two snapshots, summed per role."""
    used: dict[str, float] = {}
    for pid, (name, seconds) in after.items():
        if pid in before:
            used[name] = used.get(name, 0.0) + seconds - before[pid][1]
    return {key: round(seconds, 3) for key, seconds in used.items()}


class RssSampler(threading.Thread):
    """Peak total RSS of a fixed set of processes, sampled every 0.2 s."""

    def __init__(self, pids: list[int]) -> None:
        super().__init__(daemon=True)
        self.pids, self.peak, self.stop = pids, 0.0, threading.Event()

    def run(self) -> None:
        while True:
            self.peak = max(self.peak, sum(_rss_mib(p) for p in self.pids))
            if self.stop.wait(0.2):
                return


# -- clients ------------------------------------------------------------------------------------------
async def direct_round(engine, concurrency: int, tokens: int) -> Run:
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    run = Run()

    async def one(i: int) -> None:
        params = SamplingParams(max_tokens=tokens, ignore_eos=True, temperature=0,
                                output_kind=RequestOutputKind.DELTA)
        timer = StreamTimer(run)
        async for out in engine.generate(prompt(i), params, uuid.uuid4().hex):
            timer.tokens(len(out.outputs[0].token_ids))

    begin = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(concurrency)))
    run.seconds = time.perf_counter() - begin
    return run


def traceparent() -> dict[str, str]:
    """A new sampled W3C trace context: Triton in OpenTelemetry mode traces the request that carries it."""
    return {"traceparent": f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01"}


def grpc_inputs(i: int, tokens: int, batched: bool = False) -> list:
    """Request i's streaming inputs for tritonclient's gRPC client; `batched`: with the leading batch dimension
    that a model with batched admission (max_batch_size > 0) takes."""
    import tritonclient.grpc as grpcclient

    def tensor(name: str, value: np.ndarray, dtype: str):
        value = value[None] if batched else value
        t = grpcclient.InferInput(name, list(value.shape), dtype)
        t.set_data_from_numpy(value)
        return t

    sampling = json.dumps({"max_tokens": tokens, "ignore_eos": True, "temperature": 0}).encode()
    return [tensor("text_input", np.array([prompt(i).encode()], dtype=object), "BYTES"),
            tensor("stream", np.array([True]), "BOOL"),
            tensor("sampling_parameters", np.array([sampling], dtype=object), "BYTES"),
            tensor("return_num_output_tokens", np.array([True]), "BOOL")]


async def triton_round(server: TritonServer, model: str, concurrency: int, tokens: int,
                       scrape: bool, run: Run | None = None, traced: bool = False) -> Run:
    import tritonclient.grpc.aio as aioclient

    run = run or Run()
    client = aioclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    await client.is_model_ready(model)  # connect before timing: a real client keeps its channel open

    async def one(i: int) -> None:
        async def request():
            yield {"model_name": model, "inputs": grpc_inputs(i, tokens), "request_id": str(i)}

        timer = StreamTimer(run)
        # Read to the stream's end (the server closes it after the final response): a client that cancels
        # between the two trips tritonserver 2.51's gRPC frontend into keeping the model loaded for good.
        async for result, error in client.stream_infer(request(), headers=traceparent() if traced else None):
            if error is not None:
                run.errors += 1
                continue
            timer.tokens(int(result.as_numpy("num_output_tokens")[0]))

    async def scraper() -> None:
        import aiohttp

        async with aiohttp.ClientSession() as session:
            while True:
                began = time.perf_counter()
                async with session.get(server.metrics_url) as response:
                    await response.read()
                run.scrape.append(time.perf_counter() - began)
                await asyncio.sleep(0.5)

    scraping = asyncio.create_task(scraper()) if scrape else None
    begin = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(concurrency)))
    run.seconds = time.perf_counter() - begin
    if scraping is not None:
        scraping.cancel()
        await asyncio.gather(scraping, return_exceptions=True)
    await client.close()
    return run


_HTTP_SESSIONS: dict[asyncio.AbstractEventLoop, Any] = {}


def http_session() -> Any:
    """The running loop's aiohttp session, kept for the whole run: its connections stay open from round to round,
    as a real client's pool keeps them (the gRPC client connects before timing too), so that no stream's first
    token waits for a TCP connect of its own. `close_http_session()` at the end. (Until 2026-12-06 every round
    opened a session of its own: each stream's TTFT included a connect, for `vllm serve` and Triton alike.)"""
    import aiohttp

    loop = asyncio.get_running_loop()
    if loop not in _HTTP_SESSIONS:
        _HTTP_SESSIONS[loop] = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=HTTP_KEEPALIVE_S))
    return _HTTP_SESSIONS[loop]


async def close_http_session() -> None:
    session = _HTTP_SESSIONS.pop(asyncio.get_running_loop(), None)
    if session is not None:
        await session.close()


async def sse_round(url: str, body: Any, tokens_in: Any, concurrency: int, run: Run | None = None,
                    traced: bool = False) -> Run:
    """Streams over HTTP server-sent events on the run's session (`http_session`): `body(i)` is request i's JSON,
    `tokens_in(event, state)` the new tokens one event carries. `run`: where to count (a fresh Run by default; the
    profiler reads one while it fills); `traced`: each request with a new `traceparent`."""
    run = run or Run()
    session = http_session()

    async def one(i: int) -> None:
        timer, state = StreamTimer(run), {}
        async with session.post(url, json=body(i), headers=traceparent() if traced else None) as response:
            if response.status != 200:
                run.errors += 1
                return
            async for line in response.content:
                if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"):
                    continue
                timer.tokens(tokens_in(json.loads(line[6:]), state))

    begin = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(concurrency)))
    run.seconds = time.perf_counter() - begin
    return run


def triton_http_round(server: TritonServer, model: str, concurrency: int, tokens: int,
                      run: Run | None = None, traced: bool = False) -> Any:
    def body(i: int) -> dict:
        return {"text_input": prompt(i), "return_num_output_tokens": True,
                "parameters": {"max_tokens": tokens, "ignore_eos": True, "temperature": 0, "stream": True}}

    return sse_round(f"{server.http_url}/v2/models/{model}/generate_stream", body,
                     lambda event, _: int(event.get("num_output_tokens", 0)), concurrency, run, traced)


def vllm_serve_round(server: VllmServe, concurrency: int, tokens: int, run: Run | None = None) -> Any:
    def body(i: int) -> dict:
        return {"model": ENGINE["model"], "prompt": prompt(i), "max_tokens": tokens, "ignore_eos": True,
                "temperature": 0, "stream": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True}}

    def new_tokens(event: dict, state: dict) -> int:
        """vLLM's continuous usage stats count the completion tokens so far; the difference is this event's."""
        if not event.get("choices"):  # the final usage-only event
            return 0
        done = (event.get("usage") or {}).get("completion_tokens", 0)
        new, state["done"] = done - state.get("done", 0), done
        return new

    return sse_round(f"{server.url}/v1/completions", body, new_tokens, concurrency, run)


class VllmServe:
    """vLLM's OpenAI-compatible server as a user would start it, with the benchmark's engine arguments;
    `otlp_traces_endpoint`: its traces to that OTLP/HTTP endpoint (the first-token timeline)."""

    def __init__(self, log_path: Path, otlp_traces_endpoint: str | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.otlp_traces_endpoint = otlp_traces_endpoint
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> VllmServe:
        args = [sys.executable, "-m", "vllm.entrypoints.openai.api_server",
                "--host", "127.0.0.1", "--port", str(self.port), "--disable-uvicorn-access-log",
                "--uvicorn-log-level", "warning"]
        for key, value in ENGINE.items():  # the same engine arguments as vllm serve's flags
            args += serve_flag(key, value)
        env = dict(os.environ)
        if self.otlp_traces_endpoint:
            args += ["--otlp-traces-endpoint", self.otlp_traces_endpoint]
            env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = "http/protobuf"  # vLLM's default is gRPC
        self.log = open(self.log_path, "wb")
        self.process = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        return self

    def wait_ready(self, timeout: float) -> None:
        import requests

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vllm serve exited; see {self.log_path}")
            try:
                if requests.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(1)
        raise RuntimeError(f"vllm serve not ready within {timeout:g} s; see {self.log_path}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                for pid in reversed(process_tree(self.process.pid)):
                    with contextlib.suppress(psutil.Error):
                        psutil.Process(pid).kill()
        self.log.close()


# -- orchestration -----------------------------------------------------------------------------------
def pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def summarize(runs: list[Run]) -> dict:
    def median_range(values: list[float | None]) -> dict:
        present = [v for v in values if v is not None]
        if not present:
            return {"median": None, "min": None, "max": None}
        return {"median": statistics.median(present), "min": min(present), "max": max(present)}

    return {
        "tokens_per_s": median_range([r.tokens_per_s for r in runs]),
        "ttft_p50_ms": median_range([_ms(pct(r.ttft, 50)) for r in runs]),
        "ttft_p99_ms": median_range([_ms(pct(r.ttft, 99)) for r in runs]),
        # the round split at the last first token: the throughput ratios' share of starting against decoding
        "round_ms": median_range([_ms(r.seconds) for r in runs]),
        "last_first_token_ms": median_range([_ms(r.last_first_token_s) for r in runs]),
        "after_last_first_token_ms": median_range([_ms(r.seconds - r.last_first_token_s) for r in runs
                                                   if r.last_first_token_s is not None]),
        "itl_p50_ms": median_range([_ms(pct(r.itl, 50)) for r in runs]),
        "itl_p99_ms": median_range([_ms(pct(r.itl, 99)) for r in runs]),
        "engine_step_ms": median_range([r.engine_step_ms for r in runs]),
        "tokens_per_response": median_range([r.tokens / r.responses if r.responses else None for r in runs]),
        "scrape_p50_ms": median_range([_ms(pct(r.scrape, 50)) for r in runs]),
        "scrape_p99_ms": median_range([_ms(pct(r.scrape, 99)) for r in runs]),
        "peak_rss_mib": max((r.peak_rss_mib for r in runs), default=0.0),
        "cpu_ms_per_token": median_range([r.cpu_ms_per_token for r in runs]),
        "cpu_ms_per_token_by_role": {name: statistics.median(1000 * r.cpu_s.get(name, 0.0) / r.tokens
                                                             for r in runs if r.tokens)
                                     for name in sorted({n for r in runs for n in r.cpu_s})},
        "errors": sum(r.errors for r in runs),
        "publish": {name: median_range([r.publish.get(name) for r in runs])
                    for name in sorted({n for r in runs for n in r.publish})},
        # each round's figures; of its inter-token gaps (one per token: megabytes a run) only the percentiles
        "rounds": [{k: v for k, v in asdict(r).items() if k != "itl"}
                   | {"tokens_per_s": r.tokens_per_s, "cpu_ms_per_token": r.cpu_ms_per_token,
                      "last_first_token_s": r.last_first_token_s,
                      "itl_p50_ms": _ms(pct(r.itl, 50)), "itl_p99_ms": _ms(pct(r.itl, 99))}
                   for r in runs],
    }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def ratio(results: dict, top: str, bottom: str) -> float | None:
    if top not in results or bottom not in results:
        return None
    a, b = results[top]["tokens_per_s"]["median"], results[bottom]["tokens_per_s"]["median"]
    return a / b if a and b else None


def decoding_tokens_per_s(measured: dict) -> float:
    """A round's tokens over its time after the last stream's first token: its pace once every stream runs (every
    configuration has the same tokens, so the ratio of two is the ratio of their decoding times)."""
    first = measured["last_first_token_s"]
    return measured["tokens"] / (measured["seconds"] - first) if first is not None and measured["seconds"] > first \
        else 0.0


def paired_ratio(results: dict, top: str, bottom: str,
                 rate: Callable[[dict], float] = lambda measured: measured["tokens_per_s"]) -> dict | None:
    """top / bottom round by round (the two ran back to back, so machine drift mostly cancels), with the
    median's 95 % bootstrap interval: how far another run with as many rounds may land. `rate` reads a round's
    figure (its tokens per second unless told)."""
    if top not in results or bottom not in results:
        return None
    pairs = zip(results[top]["rounds"], results[bottom]["rounds"], strict=True)
    ratios = [rate(a) / rate(b) for a, b in pairs if rate(a) and rate(b)]
    return median_interval(ratios) if ratios else None


def paired_ttft_delta(results: dict, top: str, bottom: str) -> dict | None:
    """top's TTFT p50 minus bottom's in ms, round by round (the two ran back to back), with the median's interval
    and in how many rounds top's first tokens came later: first tokens side by side, where the medians of two
    runs' rounds spread by tens of ms at many simultaneous starts."""
    if top not in results or bottom not in results:
        return None
    pairs = zip(results[top]["rounds"], results[bottom]["rounds"], strict=True)
    deltas = [1000 * (pct(a["ttft"], 50) - pct(b["ttft"], 50)) for a, b in pairs if a["ttft"] and b["ttft"]]
    return median_interval(deltas) | {"later": sum(delta > 0 for delta in deltas)} if deltas else None


def median_interval(values: list[float]) -> dict:
    """The median of round-by-round values with its 95 % bootstrap interval: how far another run with as many
    rounds may land."""
    draws = np.random.default_rng(0).choice(values, size=(2000, len(values)))
    low, high = np.percentile(np.median(draws, axis=1), [2.5, 97.5])
    return {"median": statistics.median(values), "ci95": [float(low), float(high)], "rounds": values}


def round_order(configs: list[str], round_index: int) -> list[str]:
    """Forward in even rounds, backward in odd ones: with a fixed order, a configuration measured just after
    another (or late in every round) carries that position's bias into each of its ratios."""
    return configs if round_index % 2 == 0 else configs[::-1]


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    import vllm

    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "python": platform.python_version(), "vllm": vllm.__version__, "platform": platform.platform(),
            "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE"),
            "VLLM_CPU_NUM_OF_RESERVED_CPU": os.environ.get("VLLM_CPU_NUM_OF_RESERVED_CPU", "vLLM default")}


def publish_counters(server: TritonServer, model: str) -> dict[str, float]:
    """The publisher's own cost families (metrics.publisher) of one model, and its response threads' seconds behind
    the engine (backend.lanes_behind), summed over its instances."""
    import requests

    from vllm_triton_observable.metrics import names

    wanted = {names.METRICS_PUBLISHES: "publishes", names.METRICS_PUBLISH_WALL: "wall_s",
              names.METRICS_PUBLISH_CPU: "cpu_s", names.METRICS_PUBLISH_CALLS: "calls",
              names.RESPONSE_THREADS_BEHIND: "behind_s"}
    return sample_totals(requests.get(server.metrics_url, timeout=10).text, wanted, model)


def sample_totals(text: str, wanted: dict[str, str], model: str | None) -> dict[str, float]:
    """The sums of a /metrics text's samples named in `wanted` (sample name → key), over `model`'s series only
    when named (Triton's label)."""
    from prometheus_client.parser import text_string_to_metric_families

    totals = dict.fromkeys(wanted.values(), 0.0)
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted and (model is None or sample.labels.get("model") == model):
                totals[wanted[sample.name]] += sample.value
    return totals


def publish_cost(before: dict[str, float], after: dict[str, float], seconds: float) -> dict[str, float]:
    """Per round: Triton calls per second of the round's traffic, the publisher thread's wall and CPU ms per
    publish, and the response threads behind the engine on average over the round (thread-seconds per second)."""
    publishes = max(after["publishes"] - before["publishes"], 1.0)
    return {"calls_per_s": (after["calls"] - before["calls"]) / seconds if seconds else 0.0,
            "threads_behind": (after["behind_s"] - before["behind_s"]) / seconds if seconds else 0.0,
            "wall_ms_per_publish": 1000 * (after["wall_s"] - before["wall_s"]) / publishes,
            "cpu_ms_per_publish": 1000 * (after["cpu_s"] - before["cpu_s"]) / publishes}


@dataclass(frozen=True)
class DecodeTimes:
    """Where a configuration's engine's decode times are: a /metrics text to `read`, and in it `model`'s series
    (Triton's label; every series when None)."""

    read: Callable[[], str]
    model: str | None = None

    def totals(self) -> tuple[float, float]:
        """The sum and count of vLLM's `vllm:request_decode_time_seconds`. vLLM measures a request's first to last
        token on the engine's clock (the EngineCore stamps each step's outputs), so it is the engine's pace,
        whatever the front end did with the tokens after."""
        from vllm_triton_observable.metrics import names

        totals = sample_totals(self.read(), {f"{names.VLLM_DECODE_TIME}_sum": "sum",
                                             f"{names.VLLM_DECODE_TIME}_count": "count"}, self.model)
        return totals["sum"], totals["count"]


def decode_times_of(key: str, servers: dict[str, Any]) -> DecodeTimes | None:
    """vllm serve's /metrics, the tritonserver's (a model with metrics on), or this process's registry (the bare
    engine); None where the model exports none."""
    import requests

    if key == "a":
        import prometheus_client

        return DecodeTimes(lambda: prometheus_client.generate_latest().decode())
    if key == "v":
        return DecodeTimes(lambda: requests.get(f"{servers['vllm'].url}/metrics", timeout=10).text)
    if CONFIGS[model_of(key)][1].get("REPORT_CUSTOM_METRICS") != "true":
        return None
    url = servers[server_of(key)].metrics_url
    return DecodeTimes(lambda: requests.get(url, timeout=10).text, f"bench_{model_of(key)}")


def engine_pace(source: DecodeTimes, before: tuple[float, float], requests_ended: int, tokens: int,
                limit_s: float = 30.0) -> float | None:
    """The engine's ms per decode step over the round's requests: their mean decode time over `tokens` - 1 steps,
    once all `requests_ended` are counted (Triton publishes each second; None if they are not within `limit_s`).
    Set beside the client's round time, it says whether a front end's tokens/s is the engine's pace or the
    delivery behind it."""
    deadline = time.monotonic() + limit_s
    while True:
        total_s, count = source.totals()
        if count - before[1] >= requests_ended:
            return 1000 * (total_s - before[0]) / (count - before[1]) / (tokens - 1) if tokens > 1 else None
        if time.monotonic() > deadline:
            say(f"vLLM's decode times of {requests_ended} requests were not all counted within {limit_s:.0f} s")
            return None
        time.sleep(0.2)


def spans_dropped(server: TritonServer) -> float:
    """Spans the traced server's exporters could not deliver: non-zero means tracing was measured at a discount."""
    import requests

    from vllm_triton_observable.metrics import names

    text = requests.get(server.metrics_url, timeout=10).text
    return sample_totals(text, {names.TRACE_SPANS_DROPPED: "dropped"}, None)["dropped"]


def trace_exports(sink_url: str, wait_s: float = 30.0, still_s: float = 6.0) -> tuple[dict[str, int], dict[str, int]]:
    """OTLP exports the sink received, by content type, and the spans in them, by service: once both Triton's
    (JSON) and the SDK's (protobuf) are in and no span has arrived for `still_s` (vLLM's batch processor posts every
    5 s), or `wait_s` has passed."""
    import requests

    base = sink_url.rsplit("/v1/", 1)[0]
    deadline, last, still_since = time.monotonic() + wait_s, None, time.monotonic()
    while True:
        exports, spans = (requests.get(base + path, timeout=10).json() for path in ("/", "/services"))
        if spans != last:
            last, still_since = spans, time.monotonic()
        settled = time.monotonic() - still_since >= still_s
        if {"application/json", "application/x-protobuf"} <= set(exports) and settled or time.monotonic() > deadline:
            return exports, spans
        time.sleep(0.5)


def server_of(key: str) -> str:
    return "vllm" if key == "v" else "traced" if key in TRACED else "forked" if key in FORKED else "plain"


def model_of(key: str) -> str:
    return SAME_MODEL.get(key, key)


def write_config_model(repository: Path, key: str) -> str:
    """Configuration `key`'s Triton model into `repository` (its parameters, instance count and batched
    admission); the model's name."""
    key = model_of(key)
    batch = BATCHED_ADMISSION.get(key)
    write_model(repository, f"bench_{key}", ENGINE, params=CONFIGS[key][1], instances=INSTANCES.get(key, 1),
                extra_config=f"max_batch_size: {batch}\n" if batch else "")
    return f"bench_{key}"


def write_repositories(root: Path, configs: list[str]) -> dict[str, Path]:
    """One model repository per tritonserver the configurations need."""
    repositories = {}
    for key in {model_of(k) for k in configs}:
        if CONFIGS[key][1] is not None:
            write_config_model(repositories.setdefault(server_of(key), root / server_of(key)), key)
    return repositories


def serve_flag(key: str, value: Any) -> list[str]:
    """An engine argument as vllm serve's flag: booleans are switches (--x / --no-x), objects and lists JSON."""
    flag = f"--{key.replace('_', '-')}"
    if isinstance(value, bool):
        return [flag if value else f"--no-{flag[2:]}"]
    return [flag, json.dumps(value) if isinstance(value, dict | list) else str(value)]


def engine_args(text: str) -> dict[str, Any]:
    """--engine-args: a JSON object of engine arguments (argparse turns the ValueError into a usage error)."""
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError(f"not a JSON object: {text}")
    return value


def tracing_args(sink_url: str) -> list[str]:
    """tritonserver's flags for OpenTelemetry mode, exported to `sink_url`: `rate=0` traces exactly the requests
    that carry a `traceparent` (the clients' `traced=True`), and the header is forwarded to the backend too, which
    traces the requests whose context Triton's gRPC frontend loses (backend/trace_attributes.py says how)."""
    return ["--trace-config", "mode=opentelemetry", "--trace-config", f"opentelemetry,url={sink_url}",
            "--trace-config", "rate=0", "--trace-config", "level=TIMESTAMPS",
            "--grpc-header-forward-pattern", "traceparent"]


def start_sink() -> tuple[subprocess.Popen, str]:
    """The discarding OTLP receiver (a process of its own) and its traces URL."""
    port = free_port()
    sink = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "otlp_receiver.py"), str(port), "--discard"])
    return sink, f"http://127.0.0.1:{port}/v1/traces"


def start_servers(repositories: dict[str, Path], sink_url: str, vllm_serve: bool, servers: dict[str, Any]) -> None:
    """Start every server first, then wait for all: their engines build side by side. Each goes into `servers`
    as soon as it is started, so that a failure while the others load still stops it."""
    tracing = tracing_args(sink_url)
    for name, repository in repositories.items():
        servers[name] = TritonServer(repository, extra_args=tracing if name == "traced" else [],
                                     env=FORK_ENGINE if name == "forked" else None,
                                     log_path=ROOT / ".build" / f"bench-tritonserver-{name}.log").start()
    if vllm_serve:
        servers["vllm"] = VllmServe(ROOT / ".build" / "bench-vllm-serve.log").start()
    for server in servers.values():
        server.wait_ready(timeout=900)


def check_one_engine_each(configs: list[str], servers: dict[str, Any]) -> None:
    """Every Triton configuration's model runs one EngineCore, whatever its instance count (SHARED_ENGINE): a
    configuration of several instances that started an engine each would measure several engines as one."""
    for key in {model_of(k) for k in configs if CONFIGS[model_of(k)][1] is not None}:
        stubs = stubs_of(servers[server_of(key)].process.pid, f"bench_{key}")
        processes = cpu_seconds([pid for stub in stubs for pid in process_tree(stub)])
        cores = [pid for pid, (name, _) in processes.items() if name == "EngineCore"]
        if len(cores) != 1:
            raise RuntimeError(f"configuration {key} ({CONFIGS[key][0]}) runs {len(cores)} EngineCore processes "
                               f"for its {len(stubs)} instance(s), not one")
        say(f"configuration {key}: its EngineCore runs {Path(psutil.Process(cores[0]).exe()).name} (a fork of the "
            "stub runs triton_python_backend_stub; spawned, the Python executable)")


async def start_direct():
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.usage.usage_lib import UsageContext
    from vllm.v1.engine.async_llm import AsyncLLM

    # the backend's engine (backend/engine_runner.py): a server's defaults of max_num_seqs and batched tokens
    # its stats on, as `vllm serve`'s and a Triton model's with metrics: its decode times are read (engine_pace)
    return AsyncLLM.from_engine_args(AsyncEngineArgs(**ENGINE, disable_log_stats=False),
                                     usage_context=UsageContext.OPENAI_API_SERVER)


async def stop_direct(engine) -> None:
    """Shut the engine down and let its output handler finish (for up to a minute) before the loop closes. Run as
    the loop's only task: every other task is the engine's and is cancelled (under Python 3.11's `wait_for`, a
    wrapper around this coroutine would be one of them and end the stop with CancelledError)."""
    engine.shutdown()
    pending = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for task in pending:
        task.cancel()
    if pending:
        await asyncio.wait(pending, timeout=60)


def table(results: dict, ratios: dict) -> str:
    def fmt(value: float | None, digits: int = 0) -> str:
        return "—" if value is None else f"{value:,.{digits}f}"

    rows = ["| config | tokens/s (min–max) | TTFT p50 / p99 ms | round ms · to the last first token / after it "
            "| ITL p50 / p99 ms | engine ms / step · tokens / response | scrape p50 / p99 ms | CPU ms / token "
            "| peak RSS MiB |",
            "|---|---|---|---|---|---|---|---|---|"]
    for key, result in results.items():
        t = result["tokens_per_s"]
        rows.append(
            f"| {key}: {CONFIGS[key][0]} | {fmt(t['median'])} ({fmt(t['min'])}–{fmt(t['max'])}) | "
            f"{fmt(result['ttft_p50_ms']['median'], 1)} / {fmt(result['ttft_p99_ms']['median'], 1)} | "
            f"{fmt(result['round_ms']['median'])} · {fmt(result['last_first_token_ms']['median'])} / "
            f"{fmt(result['after_last_first_token_ms']['median'])} | "
            f"{fmt(result['itl_p50_ms']['median'], 1)} / {fmt(result['itl_p99_ms']['median'], 1)} | "
            f"{fmt(result['engine_step_ms']['median'], 2)} · {fmt(result['tokens_per_response']['median'], 2)} | "
            f"{fmt(result['scrape_p50_ms']['median'], 1)} / {fmt(result['scrape_p99_ms']['median'], 1)} | "
            f"{fmt(result['cpu_ms_per_token']['median'], 2)} | {fmt(result['peak_rss_mib'])} |")
    roles = [r for r in ("client", "API server", "stub", "tritonserver", "EngineCore", "worker")
             if any(r in result["cpu_ms_per_token_by_role"] for result in results.values())]
    rows += ["", "CPU ms per token, by process:", "", "| config | " + " | ".join(roles) + " |",
             "|---|" + "---|" * len(roles)]
    for key, result in results.items():
        by_role = result["cpu_ms_per_token_by_role"]
        rows.append(f"| {key}: {CONFIGS[key][0]} | " + " | ".join(fmt(by_role.get(r), 3) for r in roles) + " |")
    published = {key: result["publish"] for key, result in results.items() if result.get("publish")}
    if published:
        rows += ["", "The stub, from its own metrics (medians of the rounds): its response threads behind the engine "
                 "on average over the round (1 = one thread behind all the time: the stub is the limit), the "
                 "metrics publisher's Triton calls per second of traffic, its thread's wall and CPU ms per publish "
                 "(each second and as requests finish), and how long after the round Triton's values had caught up "
                 "(two publishes at the least):", "",
                 "| config | threads behind | calls / s | wall ms / publish | CPU ms / publish | caught up after (s) |",
                 "|---|---|---|---|---|---|"]
        rows += [f"| {key}: {CONFIGS[key][0]} | {fmt(p['threads_behind']['median'], 2)} | "
                 f"{fmt(p['calls_per_s']['median'])} | "
                 f"{fmt(p['wall_ms_per_publish']['median'], 1)} | {fmt(p['cpu_ms_per_publish']['median'], 1)} | "
                 f"{fmt(p['catch_up_s']['median'], 1)} |" for key, p in published.items()]
    rows.append("")
    rows += [f"{name}: {fmt(value, 3) if 'ratio' in name or 'over' in name else fmt(value, 1)}"
             for name, value in ratios.items()]
    return "\n".join(rows)


def measure(key: str, concurrency: int, tokens: int, servers: dict[str, Any], engine: Any,
            loop: asyncio.AbstractEventLoop, settle: float) -> Run:
    """One configuration, one round: the workload, its CPU per process role and peak RSS."""
    pids = config_pids(key, servers)
    sampler = RssSampler(pids)
    cpu_pids = pids if key == "a" else [*pids, os.getpid()]  # servers: the client's CPU too
    time.sleep(settle)
    counted = servers.get(server_of(key)) if key in COUNTED else None  # its publish cost is read
    published = publish_counters(counted, f"bench_{model_of(key)}") if counted is not None else None
    decode_times = decode_times_of(key, servers)
    decoded = decode_times.totals() if decode_times is not None else None
    cpu_before = cpu_seconds(cpu_pids)
    sampler.start()
    if key == "a":
        run = loop.run_until_complete(direct_round(engine, concurrency, tokens))
    elif key == "v":
        run = loop.run_until_complete(vllm_serve_round(servers["vllm"], concurrency, tokens))
    elif key in HTTP_CLIENT:
        run = loop.run_until_complete(triton_http_round(servers[server_of(key)], f"bench_{model_of(key)}", concurrency,
                                                        tokens))
    else:
        run = loop.run_until_complete(triton_round(servers[server_of(key)], f"bench_{model_of(key)}", concurrency,
                                                   tokens, scrape=key in METRICS_ON, traced=key == "e"))
    sampler.stop.set()
    sampler.join()
    run.peak_rss_mib = sampler.peak
    run.cpu_s = cpu_used(cpu_before, cpu_seconds(cpu_pids))
    if published is not None:
        run.publish = caught_up(counted, f"bench_{model_of(key)}", published, run.seconds)
    if decoded is not None and not run.errors:
        run.engine_step_ms = engine_pace(decode_times, decoded, concurrency, tokens)
    return run


def caught_up(server: TritonServer, model: str, before: dict[str, float], seconds: float,
              limit_s: float = 120.0) -> dict[str, float]:
    """The round's publish cost once the publisher has sent all of the round's changes: two more publishes after
    the round ended (the second reports the first's cost), and how long that took (`catch_up_s`: how far Triton's
    values lagged behind the engine's at the end of the round)."""
    ended = time.monotonic()
    target = publish_counters(server, model)["publishes"] + 2
    while (after := publish_counters(server, model))["publishes"] < target:
        if time.monotonic() - ended > limit_s:
            say(f"{model}: the metrics publisher did not catch up within {limit_s:.0f} s")
            break
        time.sleep(0.2)
    return publish_cost(before, after, seconds) | {"catch_up_s": time.monotonic() - ended}


ON_OFF = {"twins_x_over_b": ("x", "b"), "metrics_on_over_off": ("c", "b"), "health_on_over_off": ("d", "c"),
          "tracing_on_over_off": ("e", "f"), "per_token_histograms_over_series": ("g", "c"),
          "metrics_all_histograms_over_off": ("g", "b")}
SERVING = {"triton_http_over_vllm_serve": ("h", "v"), "triton_grpc_over_vllm_serve": ("c", "v"),
           "triton_over_direct": ("b", "a"), "triton_http_over_direct": ("h", "a"),
           "engine_spawned_over_forked": ("h", "k"), "triton_http_forked_over_vllm_serve": ("k", "v"),
           "triton_http_4_response_threads_over_vllm_serve": ("p", "v"),
           "response_threads_4_over_1": ("p", "h"),
           "triton_http_batched_admission_over_vllm_serve": ("q", "v"),
           "batched_admission_over_one_by_one": ("q", "h"), "triton_http_batched_admission_over_direct": ("q", "a"),
           "short_gil_switch_over_default": ("s", "h"), "triton_http_short_gil_switch_over_vllm_serve": ("s", "v"),
           "pythons_gil_switch_over_default": ("t", "h"),
           "triton_http_2_shared_engine_over_vllm_serve": ("m", "v"), "shared_engine_2_over_one": ("m", "h"),
           "triton_http_2_shared_engine_over_direct": ("m", "a"),
           "triton_http_4_shared_engine_over_vllm_serve": ("n", "v"), "shared_engine_4_over_one": ("n", "h"),
           "triton_http_4_shared_engine_over_direct": ("n", "a"),
           "triton_http_4_shared_batched_over_vllm_serve": ("r", "v"),
           "batched_admission_4_shared_over_not": ("r", "n"),
           "triton_http_4_shared_batched_over_direct": ("r", "a"),
           "triton_http_2_shared_batched_over_vllm_serve": ("w", "v"),
           "batched_admission_2_shared_over_not": ("w", "m"),
           "triton_http_2_shared_batched_over_direct": ("w", "a")}


def paired_ratios_of(results: dict) -> dict:
    """The tokens/s ratios, and the serving ones again over each round's decoding only (`…_decoding`): where a
    front end's ratio is below its decoding ratio, the difference is in how fast its streams started."""
    return {**{name: paired for name, (top, bottom) in {**SERVING, **ON_OFF}.items()
               if (paired := paired_ratio(results, top, bottom)) is not None},
            **{f"{name}_decoding": paired for name, (top, bottom) in SERVING.items()
               if (paired := paired_ratio(results, top, bottom, decoding_tokens_per_s)) is not None}}


def paired_ttft_deltas_of(results: dict) -> dict:
    """Every pair's TTFT p50 difference round by round (named after its ratio: `tracing_on_over_off` is e − f)."""
    return {name: paired for name, (top, bottom) in {**SERVING, **ON_OFF}.items()
            if (paired := paired_ttft_delta(results, top, bottom)) is not None}


def paired_table(paired: dict, deltas: dict) -> str:
    rows = ["Round by round (each pair ran back to back): median, 95 % bootstrap interval of the median, rounds", ""]
    for name, r in paired.items():
        rounds = ", ".join(f"{x:.3f}" for x in r["rounds"])
        rows.append(f"{name}: {r['median']:.3f} [{r['ci95'][0]:.3f}–{r['ci95'][1]:.3f}]  ({rounds})")
    rows += ["", "TTFT p50 of the first minus the second of each pair, ms, round by round: median, interval, "
             "rounds the first was later", ""]
    for name, r in deltas.items():
        rows.append(f"{name}: {r['median']:+.1f} [{r['ci95'][0]:+.1f}, {r['ci95'][1]:+.1f}]  "
                    f"later in {r['later']} of {len(r['rounds'])}")
    return "\n".join(rows)


def ratios_of(results: dict) -> dict:
    ttft = {k: results[k]["ttft_p50_ms"]["median"] for k in results}
    return {
        **{name: ratio(results, top, bottom) for name, (top, bottom) in {**SERVING, **ON_OFF}.items()},
        "ttft_p50_overhead_ms": (ttft["h"] - ttft["v"]) if ttft.get("h") is not None and ttft.get("v") is not None
        else None,  # Triton HTTP minus vllm serve
        **{f"ttft_p50_{k}_minus_a_ms": ttft[k] - ttft["a"] for k in sorted(HTTP_CLIENT) + ["v"]
           if ttft.get(k) is not None and ttft.get("a") is not None},  # above the bare engine's first tokens
        "scrape_p99_ms": max((results[k]["scrape_p99_ms"]["median"] for k in ("c", "d", "e", "g")
                              if k in results and results[k]["scrape_p99_ms"]["median"] is not None), default=None),
    }


def plot(sweep: dict[int, dict], path: Path) -> None:
    """Tokens/s and TTFT p50 against concurrency, one line per configuration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (throughput, ttft) = plt.subplots(1, 2, figsize=(11, 5))
    levels = sorted(sweep)
    for key in sweep[levels[0]]:
        label = f"{key}: {CONFIGS[key][0]}"
        throughput.plot(levels, [sweep[c][key]["tokens_per_s"]["median"] for c in levels], marker="o", label=label)
        ttft.plot(levels, [sweep[c][key]["ttft_p50_ms"]["median"] for c in levels], marker="o", label=label)
    for axis, title, unit in ((throughput, "Throughput", "tokens/s"), (ttft, "Time to first token, p50", "ms")):
        axis.set_xscale("log", base=2)
        axis.set_xticks(levels, [str(c) for c in levels])
        axis.set_xlabel("concurrent streams")
        axis.set_ylabel(unit)
        axis.set_title(title)
        axis.grid(True, alpha=0.3)
    # below both plots: the configurations' labels are long, and inside a plot they hide its highest points
    figure.legend(*throughput.get_legend_handles_labels(), loc="lower center", ncol=2, fontsize=8)
    figure.tight_layout(rect=(0, 0.02 + 0.04 * ((len(sweep[levels[0]]) + 1) // 2), 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)


def stop_everything(engine: Any, loop: asyncio.AbstractEventLoop, servers: dict[str, Any],
                    sink: subprocess.Popen | None) -> None:
    """The in-process engine, then every server at once (each shuts its engines down in seconds), then the sink;
    after a failure as after a run, so that nothing the benchmark started outlives it."""
    try:
        loop.run_until_complete(close_http_session())
        if engine is not None:
            loop.run_until_complete(stop_direct(engine))
        loop.close()
    except Exception as exc:
        say(f"the direct engine did not stop cleanly: {type(exc).__name__}: {exc}")
    finally:  # the servers are stopped whatever happened before
        stop_servers(servers)
        if sink is not None:
            sink.terminate()


def stop_servers(servers: dict[str, Any]) -> None:
    stoppers = [threading.Thread(target=server.stop, name=f"stop-{name}") for name, server in servers.items()]
    for stopper in stoppers:
        stopper.start()
    for stopper in stoppers:
        stopper.join()
    for name, server in servers.items():
        if not getattr(server, "stopped_cleanly", True):  # a backend or Triton regression: say it
            say(f"the {name} tritonserver did not stop cleanly: had to kill {server.forced_kills}, "
                f"to remove {server.removed_shm}; the end of its log ({server.log_path}):\n{server.tail(12)}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=6, help="measured rounds; even, so that each direction "
                        "of the round order counts as often")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--sweep", default="",
                        help="comma-separated concurrencies (e.g. 1,8,32,64): the rounds at each, and a PNG plot")
    parser.add_argument("--plot", default=str(ROOT / "docs" / "bench-sweep.png"), help="where --sweep draws")
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--prompt-words", type=int, default=0,
                        help="words added to each prompt (a prefill-heavy workload; prompts stay unique across "
                             "rounds); prompt and --tokens must fit the model's max_model_len")
    parser.add_argument("--configs", default=",".join(DEFAULT_CONFIGS),
                        help=f"which of {','.join(CONFIGS)} to run (default: {','.join(DEFAULT_CONFIGS)})")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured warm-up rounds")
    parser.add_argument("--settle", type=float, default=2.0,
                        help="idle seconds before each measurement (vLLM's workers busy-poll for 1 s after work)")
    parser.add_argument("--engine-args", type=engine_args, default={},
                        help="JSON added to every configuration's engine arguments, e.g. '{\"stream_interval\": 4}' "
                             "(model.json for Triton, flags for vllm serve)")
    parser.add_argument("--output", default=str(ROOT / ".bench" / "latest.json"))
    args = parser.parse_args(argv)
    ENGINE.update(args.engine_args)
    WORKLOAD["prompt_words"] = args.prompt_words
    configs = [c for c in args.configs.split(",") if c]
    unknown = set(configs) - set(CONFIGS)
    if unknown:
        parser.error(f"unknown configurations {sorted(unknown)}; choose among {','.join(CONFIGS)}")
    levels = [int(c) for c in args.sweep.split(",") if c] or [args.concurrency]

    runs: dict[int, dict[str, list[Run]]] = {level: {c: [] for c in configs} for level in levels}
    sink, sink_url, exports, engine = None, "", (None, None), None
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        repositories = write_repositories(Path(tmp), configs)
        servers: dict[str, Any] = {}
        loop = asyncio.new_event_loop()
        try:
            if "traced" in repositories:
                sink, sink_url = start_sink()
            if repositories or "v" in configs:
                say(f"starting {len(repositories)} tritonserver(s), one model per Triton configuration"
                    f"{' and vllm serve' if 'v' in configs else ''} (≈ 1 min)")
                start_servers(repositories, sink_url, "v" in configs, servers)
                check_one_engine_each(configs, servers)
            if "a" in configs:
                say("starting vLLM's AsyncLLM in this process (≈ 30 s)")
                engine = loop.run_until_complete(start_direct())
            gc.collect()
            gc.freeze()  # the client must not pause for full collections of vLLM's startup objects
            for level in levels:
                for round_index in range(args.warmup + args.rounds):
                    warm = round_index < args.warmup
                    for key in round_order(configs, round_index):
                        label = "warm-up" if warm else f"round {round_index - args.warmup + 1}/{args.rounds}"
                        run = measure(key, level, args.tokens, servers, engine, loop, args.settle)
                        say(f"{level} streams · {label} · {key} ({CONFIGS[key][0]}): {run.tokens_per_s:,.0f} tok/s, "
                            f"TTFT p50 {(_ms(pct(run.ttft, 50)) or 0):.0f} ms, errors {run.errors}")
                        if not warm:
                            runs[level][key].append(run)
            dropped = spans_dropped(servers["traced"]) if "traced" in servers else None
            exports = trace_exports(sink_url) if "e" in configs else (None, None)
        except BaseException as exc:
            say(f"stopping every server: {type(exc).__name__}: {exc}")
            raise
        finally:
            stop_everything(engine, loop, servers, sink)

    sweep = {level: {key: summarize(r) for key, r in by_key.items()} for level, by_key in runs.items()}
    results = sweep[levels[-1]]
    ratios = ratios_of(results)
    report = {"ratios": ratios, "paired_ratios": paired_ratios_of(results),
              "paired_ttft_p50_delta_ms": paired_ttft_deltas_of(results),
              "configs": {k: CONFIGS[k][0] for k in configs}, "results": results,
              "trace_spans_dropped": dropped, "trace_exports": exports[0], "trace_spans_by_service": exports[1],
              "workload": {"concurrency": levels[-1], "tokens": args.tokens, "rounds": args.rounds,
                           "warmup": args.warmup, "prompt": PROMPT, "prompt_words": args.prompt_words,
                           "engine": ENGINE},
              "machine": machine(), "command": "make bench BENCH_ARGS='" + " ".join(argv) + "'"}
    if len(levels) > 1:
        report["sweep"] = {str(level): {"ratios": ratios_of(by_key), "results": {
            key: {"tokens_per_s": r["tokens_per_s"], "ttft_p50_ms": r["ttft_p50_ms"]} for key, r in by_key.items()}}
            for level, by_key in sweep.items()}
        plot(sweep, Path(args.plot))
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2))
    for level in levels:
        print(f"\n{level} concurrent streams:\n")
        print(table(sweep[level], ratios_of(sweep[level])))
        print()
        print(paired_table(paired_ratios_of(sweep[level]), paired_ttft_deltas_of(sweep[level])))
    print()
    if exports[1] is not None:
        say(f"traced spans received, by service: {exports[1]}; spans the backend counted as dropped: {dropped}")
    say(f"JSON written to {output}" + (f"; plot drawn to {args.plot}" if len(levels) > 1 else ""))
    return 0


if __name__ == "__main__":
    try:
        code = main(sys.argv[1:])
    except KeyboardInterrupt:
        code = 130
    except Exception:
        traceback.print_exc()
        say("the benchmark failed (above); every server it started is stopped")
        code = 1
    sys.stdout.flush()
    sys.stderr.flush()
    # An in-process engine's threads (configuration a) must not keep a finished or failed run alive.
    os._exit(code)
