"""Model repositories, HTTP/gRPC clients and a metrics scraper for the integration tests."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import requests
import triton_launcher
from prometheus_client.parser import text_string_to_metric_families
from triton_launcher import TINY_ENGINE, TINY_MODEL, TritonServer  # noqa: F401 - re-exported

ROOT = Path(__file__).resolve().parents[2]
TINY_LORA = TINY_MODEL.with_name("tiny-llama-lora")
# A 256 MiB KV cache (65,536 tokens of the tiny model) per test engine, so that the two test workers' servers fit
# in memory side by side. vLLM lets VLLM_CPU_KVCACHE_SPACE (whole GiB, set by scripts/env.sh) override
# kv_cache_memory_bytes, so the servers of these models run without it (server_env).
BASE_ENGINE = {**TINY_ENGINE, "kv_cache_memory_bytes": 256 * 2**20}


def write_model(repo: Path, name: str, engine: dict[str, Any] | str | None = None, **options: Any) -> Path:
    return triton_launcher.write_model(repo, name, BASE_ENGINE if engine is None else engine, **options)


@contextmanager
def explicit_mode_server(repo: Path, models: dict[str, dict[str, str]], startup: list[str],
                         env: dict[str, str] | None = None) -> Iterator[Any]:
    """A server in explicit model-control mode (repository API, unload recovery) with these models in its
    repository, `startup` of them loaded (the others are loaded through the repository API when needed)."""
    for name, params in models.items():
        write_model(repo, name, params=params)
    args = ["--model-control-mode=explicit", *(f"--load-model={name}" for name in startup)]
    with TritonServer(repo, env={**server_env(), **(env or {})}, extra_args=args) as triton:
        triton.wait_ready(timeout=900, models=startup)
        yield triton


def backends_with_vllm_plugin(directory: Path, name: str, source: str) -> Path:
    """A copy of the assembled backends with a vLLM general plugin `name` (module source `source`, entry point
    `name:register`) beside model.py: vLLM loads it when the engine arguments are built in the stub, and in the
    EngineCore and worker. Pass the result as BACKEND_DIR to a server of the test's own."""
    import shutil

    backends = directory / "backends"
    shutil.copytree(os.environ["BACKEND_DIR"], backends, symlinks=True)
    (backends / "vllm" / f"{name}.py").write_text(source)
    info = backends / "vllm" / f"{name}-0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: 0.0\n")
    (info / "entry_points.txt").write_text(f"[vllm.general_plugins]\n{name} = {name}:register\n")
    return backends


def repository(server: Any, action: str, model: str) -> requests.Response:
    """Explicit mode's repository API: load or unload `model` (a load returns once the model is ready)."""
    return requests.post(f"{server.http_url}/v2/repository/models/{model}/{action}", timeout=600)


def touch_model(model_dir: Path) -> None:
    """Newer times on a model's files, so that Triton's next load of the loaded model reloads it (a load of
    unchanged files does nothing)."""
    later = time.time() + 2
    for changed in (model_dir / "config.pbtxt", model_dir / "1" / "model.json"):
        os.utime(changed, (later, later))


# -- load --------------------------------------------------------------------------------------------
LONG_STREAM = {"stream": True, "max_tokens": 1000, "ignore_eos": True}


class Stream(threading.Thread):
    """One long streaming request in the background, recording when each event arrived (a connection the server
    broke counts as an error event)."""

    def __init__(self, server: Any, model: str) -> None:
        super().__init__(daemon=True)
        self.server, self.model = server, model
        self.events: list[tuple[float, dict]] = []

    def run(self) -> None:
        url = f"{self.server.http_url}/v2/models/{self.model}/generate_stream"
        try:
            with requests.post(url, json={"text_input": "load", "parameters": LONG_STREAM}, stream=True,
                               timeout=120) as r:
                for line in r.iter_lines():
                    if line.startswith(b"data: "):
                        self.events.append((time.monotonic(), json.loads(line[6:])))
        except requests.RequestException as exc:
            self.events.append((time.monotonic(), {"error": f"connection: {type(exc).__name__}"}))

    @property
    def error(self) -> tuple[float, str] | None:
        return next(((t, e["error"]) for t, e in self.events if "error" in e), None)


def start_load(server: Any, model: str, n: int = 3) -> list[Stream]:
    """`n` long streams under way (each has had two events)."""
    streams = [Stream(server, model) for _ in range(n)]
    for s in streams:
        s.start()
    wait_until(lambda: all(len(s.events) >= 2 for s in streams), timeout=60,
               what=lambda: f"{n} streams of {model} under way, events so far: "
                            f"{[(len(s.events), s.error[1] if s.error else None) for s in streams]}")
    return streams


# -- processes ----------------------------------------------------------------------------------------
@dataclass
class Launched:
    """`make serve`'s launcher running: its process, the tritonserver's pid, what it printed, and the server's log
    (one per launch: the suite's two workers may each run one, and a shared file was once overwritten by the other
    server's while a test read it)."""
    endpoint: TritonServer
    process: subprocess.Popen[str]
    pid: int
    output: list[str]
    log_path: Path


@contextmanager
def launched(model_repo: Path | None = None, triton_args: str = "",
             env: dict[str, str] | None = None) -> Iterator[Launched]:
    """`make serve` (MODEL_REPO=model_repo, TRITON_ARGS=triton_args, and `env`), on free ports, until it printed
    its examples; stopped afterwards."""
    ports = [triton_launcher.free_port() for _ in range(3)]
    log_path = ROOT / ".build" / f"serve-{ports[0]}.log"
    env = (dict(os.environ) | ({"MODEL_REPO": str(model_repo)} if model_repo else {})
           | ({"TRITON_ARGS": triton_args} if triton_args else {}) | (env or {}))
    process = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "triton_launcher.py"), "--http-port", str(ports[0]),
         "--grpc-port", str(ports[1]), "--metrics-port", str(ports[2]), "--log", str(log_path)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    output: list[str] = []
    pid = None
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:  # through the printed examples, which end with the Ctrl-C hint
        line = process.stdout.readline()
        output.append(line)
        if found := re.search(r"tritonserver pid (\d+)", line):
            pid = int(found.group(1))
        if "Ctrl-C stops the server" in line or not line:
            break
    try:
        assert "ready. Try:" in "".join(output), "".join(output[-20:]) + process_states(pid)
        # Only the ports matter to the helpers; nothing is started through this object.
        endpoint = TritonServer(model_repo or ROOT / "samples" / "model_repository", http_port=ports[0],
                                grpc_port=ports[1], metrics_port=ports[2])
        yield Launched(endpoint, process, pid, output, log_path)
    finally:
        if process.poll() is None:  # a failed test must not leave the server running
            process.send_signal(signal.SIGINT)
            process.wait(120)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


def process_states(pid: int | None) -> str:
    """Where each process of a server that did not become ready is waiting (kernel wait channel per thread), and
    each stub's threads' stacks."""
    if pid is None or not psutil.pid_exists(pid):
        return "\n(no tritonserver process)"
    lines = []
    root = psutil.Process(pid)
    for process in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error, OSError):
            waits = sorted({Path(f"/proc/{process.pid}/task/{t.id}/wchan").read_text() or "running"
                            for t in process.threads()})
            lines.append(f"{process.pid} {cmdline(process)[:60]} {process.status()} "
                         f"cpu={process.cpu_times().user:.0f}s "
                         f"waits={waits}")
    stubs = [p for p in root.children(recursive=True)
             if cmdline(p).split(" ")[0].endswith("triton_python_backend_stub")]
    return "\n" + "\n".join([*lines, *(python_stacks(stub.pid) for stub in stubs)])


def python_stacks(pid: int) -> str:
    """py-spy's dump of every thread of a stub, native frames included: where each one waits (a load once hung with
    every thread of the stub asleep after `initialize()` had logged its last line)."""
    from profile_serving import py_spy_path  # only when a server failed: it imports make bench's module

    py_spy = py_spy_path()
    if py_spy is None:
        return f"(no py-spy installed: no stacks of {pid})"
    try:
        dump = subprocess.run([py_spy, "dump", "--native", "--pid", str(pid)], capture_output=True, text=True,
                              timeout=30)
    except subprocess.TimeoutExpired:
        return f"py-spy dump --pid {pid}: no answer in 30 s"
    return dump.stdout + dump.stderr


def printed_commands(output: list[str]) -> list[str]:
    """The curl commands for the models the launcher printed, each joined across its continuation lines."""
    text = "".join(output).replace("\\\n", " ")
    return [line.strip() for line in text.splitlines() if line.strip().startswith("curl") and "/v2/models/" in line]


def cmdline(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


def stub_of(server: Any, model: str) -> psutil.Process:
    """The Python stub that serves `model` on this server (a TritonServer, or the pid of one `launched()`)."""
    pid = server if isinstance(server, int) else server.process.pid
    return next(p for p in psutil.Process(pid).children() if f"/{model}/1/model.py" in cmdline(p))


def leaked(ours: set[str], timeout: float = 10.0) -> set[str]:
    """Of these /dev/shm entries, those still there once no process uses them (an ending process's semaphores are
    unlinked by its resource tracker a moment after it exits)."""
    deadline = time.monotonic() + timeout
    while (left := (ours & triton_launcher.shm_entries()) - triton_launcher.shm_in_use()) \
            and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def ipc_directory(stub: psutil.Process) -> Path | None:
    """The stub's IPC socket directory (backend.ipc_dir), one per instance, in the temp directory."""
    import tempfile

    from vllm_triton_observable.backend.ipc_dir import PREFIX

    found = sorted(Path(tempfile.gettempdir()).glob(f"{PREFIX}{stub.pid}-*"))
    assert len(found) <= 1, found
    return found[0] if found else None


def ipc_sockets(directory: Path) -> list[Path]:
    """The engines' socket files under an instance's IPC directory: {engine number}/{uuid}."""
    return sorted(p for p in directory.rglob("*") if p.is_socket())


def engine_of(stub: psutil.Process) -> tuple[psutil.Process, psutil.Process]:
    """(EngineCore, the process that runs the model) of a stub's engine: its Worker where vLLM starts one (always
    on CPU, and with several GPUs), else the EngineCore itself (vLLM's one-process executor on one GPU)."""
    core = next(c for c in stub.children() if "VLLM::EngineCore" in cmdline(c))
    return core, next((c for c in core.children() if "VLLM::Worker" in cmdline(c)), core)


def generate(server: Any, model: str, body: dict[str, Any], timeout: float = 60) -> tuple[int, dict[str, Any]]:
    response = requests.post(f"{server.http_url}/v2/models/{model}/generate", json=body, timeout=timeout)
    return response.status_code, response.json()


def generate_stream(server: Any, model: str, body: dict[str, Any], timeout: float = 60) -> list[dict[str, Any]]:
    """The SSE events of /generate_stream, parsed."""
    with requests.post(f"{server.http_url}/v2/models/{model}/generate_stream", json=body, stream=True,
                       timeout=timeout) as response:
        return sse_events(response.iter_lines())


def sse_events(lines: Iterable[bytes | str] | str) -> list[dict[str, Any]]:
    """The `data:` events of a server-sent event stream, parsed."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    return [json.loads(line[6:]) for line in lines if line[:6] in (b"data: ", "data: ")]


def run_command(command: str, timeout: float = 120) -> str:
    """A shell command's standard output (it must succeed)."""
    done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
    return done.stdout


def texts(value: Any) -> list[str]:
    return value if isinstance(value, list) else [value]


# -- gRPC ---------------------------------------------------------------------------------------------
def grpc_inputs(prompt: bytes | str, *, stream: bool = True, sampling: dict[str, Any] | None = None,
                **flags: bool) -> list[Any]:
    import tritonclient.grpc as grpcclient

    def tensor(name: str, array: np.ndarray, dtype: str) -> Any:
        t = grpcclient.InferInput(name, list(array.shape), dtype)
        t.set_data_from_numpy(array)
        return t

    data = prompt.encode() if isinstance(prompt, str) else prompt
    inputs = [tensor("text_input", np.array([data], dtype=object), "BYTES"),
              tensor("stream", np.array([stream]), "BOOL")]
    if sampling is not None:
        inputs.append(tensor("sampling_parameters", np.array([json.dumps(sampling).encode()], dtype=object),
                             "BYTES"))
    for name, value in flags.items():
        inputs.append(tensor(name, np.array([value]), "BOOL"))
    return inputs


async def grpc_stream(server: Any, model: str, inputs: list[Any], *, stop_after: int | None = None,
                      on_response: Callable[[Any], None] | None = None,
                      timeout: float = 60, headers: dict[str, str] | None = None,
                      request_id: str = "r", parameters: dict[str, Any] | None = None) -> list[tuple[Any, Any]]:
    """Responses of one streaming request (`parameters`: the request's own); with `stop_after`, the client cancels
    after that many.

    Otherwise the stream is read to its end — the server closes it after the final response, as the client has
    half-closed — and never cancelled after the final response: tritonserver 2.51's gRPC frontend leaks the
    stream, and with it a reference to the model, when a cancellation arrives between the two (the model then
    never unloads; see backend/unload_watch.py)."""
    import tritonclient.grpc.aio as aioclient

    client = aioclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")

    async def requests_iter():
        yield {"model_name": model, "inputs": inputs, "request_id": request_id, "parameters": parameters}

    results: list[tuple[Any, Any]] = []
    stream = client.stream_infer(requests_iter(), stream_timeout=timeout, headers=headers)
    try:
        async for result, error in stream:
            results.append((result, error))
            if on_response is not None and error is None:
                on_response(result)
            if stop_after is not None and len(results) >= stop_after:
                stream.cancel()
                break
    finally:
        await client.close()
    return results


def run(coro: Any) -> Any:
    return asyncio.run(coro)


# -- metrics ------------------------------------------------------------------------------------------
def scrape(server: Any) -> dict[str, Any]:
    """Metric families by name, parsed with prometheus_client's parser."""
    text = requests.get(server.metrics_url, timeout=10).text
    return {family.name: family for family in text_string_to_metric_families(text)}


def snapshot(server: Any) -> dict[str, Any]:
    """A scrape that includes everything that happened before the call (the backend publishes every second)."""
    time.sleep(1.2)
    return scrape(server)


def exposed_sample_name(family: Any, sample: Any) -> str:
    """The name as on the wire: prometheus_client's parser appends `_total` to every counter sample, also to a
    histogram's `_bucket`/`_sum`/`_count` series, which this backend publishes as Triton counters."""
    if (family.type == "counter" and family.name.endswith(("_bucket", "_sum", "_count"))
            and sample.name == family.name + "_total"):
        return family.name
    return sample.name


def series(families: dict[str, Any], sample: str, **labels: str) -> list[Any]:
    return [s for family in families.values() for s in family.samples
            if exposed_sample_name(family, s) == sample and all(s.labels.get(k) == v for k, v in labels.items())]


def value(families: dict[str, Any], sample: str, **labels: str) -> float:
    """Sum of the samples named `sample` (e.g. `vllm:prompt_tokens_total`) whose labels include `labels`."""
    return sum(s.value for s in series(families, sample, **labels))


TRITON_LABELS = ("model", "version", "model_instance")  # what Triton's series add to the registry's


def histogram_series(families: dict[str, Any], histograms: set[str], **labels: str) -> dict[tuple, float]:
    """The `_bucket`, `_sum` and `_count` series of these histograms, whether exposed as a histogram family or as
    counter series, as {(series name, labels but Triton's, `le` as a number): value}."""
    found = {}
    for family in families.values():
        for sample in family.samples:
            name = exposed_sample_name(family, sample)
            wanted = all(sample.labels.get(k) == v for k, v in labels.items())
            if name.endswith("_created") or name.rsplit("_", 1)[0] not in histograms or not wanted:
                continue
            kept = {k: (float(v) if k == "le" else v) for k, v in sample.labels.items() if k not in TRITON_LABELS}
            found[(name, tuple(sorted(kept.items())))] = sample.value
    return found


def exposition_mismatches(server: Any, exposition: Path, instance: str) -> list[str]:
    """Where Triton's histogram series of one model instance differ from the registry as prometheus_client renders
    it (the file VLLM_TRITON_EXPOSITION_DIR has the backend write): [] when every series is equal."""
    if not exposition.exists():
        return [f"{exposition} not written"]
    own = {family.name: family for family in text_string_to_metric_families(exposition.read_text())}
    histograms = {name for name, family in own.items() if family.type == "histogram"}
    expected = histogram_series(own, histograms)
    published = histogram_series(scrape(server), histograms, model_instance=instance)
    problems = [f"{key}: missing on Triton" for key in expected.keys() - published.keys()]
    problems += [f"{key}: only on Triton" for key in published.keys() - expected.keys()]
    problems += [f"{key}: Triton {published[key]!r}, vLLM's exposition {value_!r}" for key, value_ in expected.items()
                 if key in published and abs(published[key] - value_) > 1e-9 * max(1.0, abs(value_))]
    return problems


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, interval: float = 0.2,
               what: Callable[[], str] | None = None) -> None:
    """Until `predicate` holds; past `timeout` s fail, saying what was awaited and how far it got (`what`)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not reached in {timeout:g} s" + (f": {what()}" if what else ""))
        time.sleep(interval)


def server_env() -> dict[str, str]:
    """The environment of a server whose models are written by `write_model` (their KV cache size is theirs)."""
    return {k: v for k, v in os.environ.items() if k != "VLLM_CPU_KVCACHE_SPACE"}
