"""Start, watch and stop a real `tritonserver` with this project's backend directory.

One implementation for `make serve` and for the tests: the server runs in its own process group so that
stopping it also ends the Python stubs and vLLM's EngineCore/Worker processes, and the Python backend's
shared-memory regions it leaves behind are removed. It stays in the caller's session: with the kernel's
autogroup scheduling a new session is a scheduling group of its own, and vLLM's busy-polling EngineCore then
starved the clients of the other group for seconds at a time (docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from engine_settings import TINY_MODEL, device_settings, engine_for, gpu_present  # noqa: F401 - TINY_MODEL re-exported

ROOT = Path(__file__).resolve().parent.parent
SAMPLE_REPOSITORY = ROOT / "samples" / "model_repository"
# model.json for the tiny model, as the tests and the soak run it (scripts/engine_settings.py: per device).
TINY_ENGINE = engine_for("test")
# Shared memory a server and its children may leave behind when killed: the Python backend's regions
# (named after the backend, e.g. triton_vllm_backend_shm_region_*), torch/vLLM's psm_* and semaphores.
SHM_GLOBS = ("triton_*_backend_shm_region_*", "psm_*", "sem.mp-*")


def shm_entries() -> set[str]:
    return {p.name for pattern in SHM_GLOBS for p in Path("/dev/shm").glob(pattern)}


def shm_in_use(processes: list[Any] | None = None) -> set[str]:
    """Names under /dev/shm that these live processes (default: all) have open or mapped."""
    import psutil

    used: set[str] = set()
    for process in psutil.process_iter() if processes is None else processes:
        try:
            paths = [f.path for f in process.open_files()] + [m.path for m in process.memory_maps(grouped=True)]
        except psutil.Error:
            continue
        used.update(p[len("/dev/shm/"):].split(" ")[0] for p in paths if p.startswith("/dev/shm/"))
    return used


def write_model(repo: Path, name: str, engine: dict[str, Any] | str | None = None, *,
                params: dict[str, str] | None = None, instances: int = 1, files: dict[str, str] | None = None,
                extra_config: str = "") -> Path:
    """A model directory laid out like the official sample: config.pbtxt + 1/model.json (the tiny model's by
    default)."""
    model_dir = repo / name
    (model_dir / "1").mkdir(parents=True)
    lines = ['backend: "vllm"', f"instance_group [{{ count: {instances} kind: KIND_MODEL }}]"]
    for key, value in (params or {}).items():
        lines.append(f'parameters: {{ key: "{key}" value: {{ string_value: "{value}" }} }}')
    (model_dir / "config.pbtxt").write_text("\n".join(lines) + "\n" + extra_config)
    engine = TINY_ENGINE if engine is None else engine
    (model_dir / "1" / "model.json").write_text(engine if isinstance(engine, str) else json.dumps(engine))
    for filename, text in (files or {}).items():
        (model_dir / "1" / filename).write_text(text)
    return model_dir


def free_port() -> int:
    """A free port below Linux's ephemeral range (32768-60999).

    Triton binds its metrics port only after every model has loaded, a minute or more after the port was chosen;
    a port from the ephemeral range can meanwhile be taken by any outgoing connection or by an engine's
    randomly bound sockets ("Socket already in use"). Ports below the range are only ever taken on purpose.
    Parallel test workers (pytest-xdist's PYTEST_XDIST_WORKER=gw<N>) draw from slices of their own.
    """
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0) % 4
    low = 20000 + worker * 3000
    rng = random.SystemRandom()
    while True:
        port = rng.randrange(low, low + 3000)
        if port not in _HANDED_OUT and port_free("127.0.0.1", port):
            _HANDED_OUT.add(port)  # never twice in one process (servers started together would collide)
            return port


_HANDED_OUT: set[int] = set()


def port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def http_status(url: str, timeout: float = 2.0) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (urllib.error.URLError, OSError):
        return None


class ServerFailed(RuntimeError):
    pass


# How long the model's processes may outlive tritonserver and still end on their own: the backend's bound after a
# stub or server that ended without unloading (docs/health.md; tests/integration/test_residue.py measures it). One
# orderly exit leaves nothing: Triton waits for the stub, the stub for its engine. But on a host starved of CPU,
# Triton 2.51 may find the stub unhealthy at unload (python_backend asks it for a sign of life within one second)
# and SIGKILL it without its finalize; the engine watch then shuts the engine down, 4-8 s after the server's exit on
# two busy cores (test_residue.py provokes it).
OUTLIVE_BOUND_S = 30.0


class TritonServer:
    def __init__(
        self,
        model_repo: Path,
        *,
        http_port: int | None = None,
        grpc_port: int | None = None,
        metrics_port: int | None = None,
        bind: str = "127.0.0.1",
        extra_args: list[str] | None = None,
        log_path: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.model_repo = Path(model_repo).resolve()  # the server runs in .build, not in the caller's directory
        self.http_port = http_port or free_port()
        self.grpc_port = grpc_port or free_port()
        self.metrics_port = metrics_port or free_port()
        self.bind = bind
        self.extra_args = extra_args or []
        self.log_path = log_path or ROOT / ".build" / f"tritonserver-{self.http_port}.log"
        self.env = {**os.environ, **(env or {})}
        self.process: subprocess.Popen[bytes] | None = None
        self._shm_before: set[str] = set()
        self.forced_kills: list[str] = []
        self.removed_shm: list[str] = []
        self.outlived_s = 0.0  # how long the model's processes outlived the server at the last stop()

    @property
    def host(self) -> str:
        return "127.0.0.1" if self.bind in ("0.0.0.0", "127.0.0.1") else self.bind

    @property
    def http_url(self) -> str:
        return f"http://{self.host}:{self.http_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.metrics_port}/metrics"

    def command(self) -> list[str]:
        return [
            self.env.get("TRITONSERVER", "tritonserver"),
            f"--model-repository={self.model_repo}",
            f"--backend-directory={self.env.get('BACKEND_DIR', ROOT / '.build' / 'backends')}",
            f"--http-port={self.http_port}", f"--grpc-port={self.grpc_port}",
            f"--metrics-port={self.metrics_port}",
            f"--http-address={self.bind}", f"--grpc-address={self.bind}", f"--metrics-address={self.bind}",
            "--allow-gpu-metrics=false", "--pinned-memory-pool-byte-size=0",
            *self.extra_args,
        ]

    def start(self) -> TritonServer:
        for port in (self.http_port, self.grpc_port, self.metrics_port):
            if not port_free(self.bind, port):
                raise ServerFailed(f"port {port} on {self.bind} is already in use (another tritonserver?)")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._shm_before = shm_entries()
        log = open(self.log_path, "wb")
        self.process = subprocess.Popen(
            self.command(), stdout=log, stderr=subprocess.STDOUT, env=self.env, process_group=0,
            cwd=self.log_path.parent,  # not the source tree: the stub must import the installed backend
        )
        log.close()
        return self

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_ready(self, timeout: float = 300.0, models: list[str] | None = None, progress=None) -> None:
        """Until every model (or the whole server) is ready; fail with the log's tail, never hang."""
        start = time.monotonic()
        urls = [f"{self.http_url}/v2/models/{m}/ready" for m in models] if models else [
            f"{self.http_url}/v2/health/ready"]
        while True:
            if self.process is None or self.process.poll() is not None:
                raise ServerFailed(f"tritonserver exited while loading:\n{self.tail()}")
            if all(http_status(u) == 200 for u in urls):
                return
            elapsed = time.monotonic() - start
            if elapsed > timeout:
                raise ServerFailed(f"not ready after {timeout:.0f} s:\n{self.tail()}")
            if progress is not None:
                progress(elapsed)
            time.sleep(0.5)

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_text().splitlines()[-lines:])

    def stop(self, timeout: float = 45.0) -> None:
        """SIGTERM (Triton unloads models, vLLM shuts down), then SIGKILL the whole group if needed."""
        if self.process is None:
            return
        pgid = self.process.pid
        ours = shm_in_use(self._tree())  # only these may be cleaned up: other servers may run beside this one
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                pass
        exited = time.monotonic()
        # After a server that exited, its model's processes still ending on their own are not leaks; the group of
        # one that did not exit is killed at once.
        deadline = exited + (OUTLIVE_BOUND_S if self.process.poll() is not None else 0.0)
        while (members := self._group_members(pgid)) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.outlived_s = time.monotonic() - exited
        self.forced_kills = members
        self._kill_group(pgid)
        self.process.wait()
        self.removed_shm = self._remove_leftover_shm(ours)
        self.process = None

    @property
    def stopped_cleanly(self) -> bool:
        """Whether the last stop() found nothing to clean up: every backend process ended and freed its memory."""
        return not self.forced_kills and not self.removed_shm

    @staticmethod
    def _group_members(pgid: int) -> list[str]:
        import psutil

        members = []
        for process in psutil.process_iter(["pid", "ppid", "cmdline", "status"]):
            try:
                if process.info["status"] != psutil.STATUS_ZOMBIE and os.getpgid(process.pid) == pgid:
                    # the parent says whose it is (a stub's resource tracker, an EngineCore's worker, …)
                    members.append(f"{process.pid} (parent {process.info['ppid']}) "
                                   f"{' '.join(process.info['cmdline'] or [])[:80]}")
            except (ProcessLookupError, psutil.Error):
                continue
        return members

    @staticmethod
    def _kill_group(pgid: int) -> None:
        """Children (stubs, EngineCore, Worker) share the server's process group; none may survive."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                return
            time.sleep(0.1)

    def _tree(self) -> list[Any]:
        import psutil

        try:
            root = psutil.Process(self.process.pid)
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def _remove_leftover_shm(self, ours: set[str]) -> list[str]:
        """What this server's processes had mapped, still exists and nothing uses any more."""
        leftovers = sorted((ours & shm_entries()) - self._shm_before - shm_in_use())
        for name in leftovers:
            (Path("/dev/shm") / name).unlink(missing_ok=True)
        return leftovers

    def __enter__(self) -> TritonServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def http_json(url: str, body: dict[str, Any] | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=10) as response:
        return json.loads(response.read())


def pooling(model_repo: Path, model: str) -> bool:
    """Whether a vLLM model's model.json makes it a pooling (embedding) model."""
    for engine_args in model_repo.glob(f"{model}/*/model.json"):
        with contextlib.suppress(OSError, ValueError):
            if json.loads(engine_args.read_text()).get("runner") == "pooling":
                return True
    return False


def examples(http_url: str, model_repo: Path, prompt: str = "What is Triton?") -> list[str]:
    """curl commands for each ready vLLM model and ensemble, built from its configuration: its required text
    inputs, `max_tokens` for a vLLM model (an `embedding_request` for a pooling model), `generate` unless it is
    decoupled, `generate_stream` if it is."""
    commands = []
    for entry in http_json(f"{http_url}/v2/repository/index", {"ready": True}):
        config = http_json(f"{http_url}/v2/models/{entry['name']}/config")
        vllm = config.get("backend") == "vllm"
        if not vllm and config.get("platform") != "ensemble":
            continue  # e.g. an ensemble's Python steps
        decoupled = config.get("model_transaction_policy", {}).get("decoupled", False)
        for stream in (False, True) if decoupled else (False,):
            if stream is False and decoupled and not vllm:
                continue  # a decoupled ensemble's /generate answers only when exactly one response comes back
            body: dict[str, Any] = {i["name"]: prompt for i in config.get("input", [])
                                    if i["data_type"] == "TYPE_STRING" and not i.get("optional")}
            if vllm and pooling(model_repo, entry["name"]):
                body = {"text_input": "", "embedding_request": json.dumps({"input": prompt})}
            elif vllm:
                body["parameters"] = {"stream": stream, "max_tokens": 16}
            endpoint = "generate_stream" if stream else "generate"
            commands.append(f"  curl -s {'-N ' if stream else ''}-X POST {http_url}/v2/models/{entry['name']}/"
                            f"{endpoint} \\\n       -d '{json.dumps(body)}'")
    return commands


def device_repository(model_repo: Path) -> Path:
    """A sample repository of the project's as this device runs it: on a GPU, a copy in .build whose model.json
    files have the GPU's engine settings (scripts/engine_settings.py), a relative model path made absolute; any
    other repository is the operator's and is served as it is."""
    samples = ROOT / "samples"
    if not gpu_present() or samples.resolve() not in model_repo.resolve().parents:
        return model_repo
    target = ROOT / ".build" / f"gpu-{model_repo.name}"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(model_repo, target, ignore=shutil.ignore_patterns("tiny-llama*"))
    for engine_file in target.glob("*/*/model.json"):
        original = model_repo / engine_file.relative_to(target)
        engine = json.loads(original.read_text())
        for key in ("model", "tokenizer"):
            if isinstance(engine.get(key), str) and (original.parent / engine[key]).exists():
                engine[key] = str((original.parent / engine[key]).resolve())
        engine_file.write_text(json.dumps({**engine, **device_settings("serve")}, indent=2) + "\n")
    return target


def serve(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="make serve: Triton + the vllm backend, until Ctrl-C")
    parser.add_argument("--model-repo", default=os.environ.get("MODEL_REPO") or SAMPLE_REPOSITORY)
    parser.add_argument("--http-port", type=int, default=int(os.environ.get("HTTP_PORT") or 8000))
    parser.add_argument("--grpc-port", type=int, default=int(os.environ.get("GRPC_PORT") or 8001))
    parser.add_argument("--metrics-port", type=int, default=int(os.environ.get("METRICS_PORT") or 8002))
    parser.add_argument("--bind", default=os.environ.get("BIND") or "127.0.0.1")
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--log", type=Path, default=ROOT / ".build" / "serve.log",
                        help="tritonserver's log (one file per server: two servers must not share one)")
    args = parser.parse_args(argv)
    server = TritonServer(
        device_repository(Path(args.model_repo)), http_port=args.http_port, grpc_port=args.grpc_port,
        metrics_port=args.metrics_port, bind=args.bind,
        extra_args=os.environ.get("TRITON_ARGS", "").split(), log_path=args.log,
    )
    stopping = False

    def on_signal(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True
        raise KeyboardInterrupt

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # SIGINT may be ignored when backgrounded
        signal.signal(signum, on_signal)
    say = lambda msg: print(f"\033[1m[serve]\033[0m {msg}", flush=True)  # noqa: E731
    log = args.log.resolve()
    shown = log.relative_to(ROOT) if log.is_relative_to(ROOT) else log
    say(f"starting tritonserver on {args.model_repo} (log: {shown})")
    try:
        server.start()
        say(f"tritonserver pid {server.process.pid}; waiting for the models to be ready")
        last = [0.0]

        def progress(elapsed: float) -> None:
            if elapsed - last[0] >= 5:
                last[0] = elapsed
                say(f"loading models… {elapsed:.0f} s (the first start imports vLLM in several processes)")

        server.wait_ready(args.timeout, progress=progress)
        h, m = server.http_url, server.metrics_url
        say("ready. Try:")
        print("\n" + "\n\n".join(examples(h, server.model_repo)) + f"""

  curl -s {m} | grep '^vllm'

Ctrl-C stops the server (and every process it started).
""", flush=True)
        while server.process is not None and server.process.poll() is None:
            time.sleep(0.5)
        say(f"tritonserver exited with {server.process.returncode if server.process else '?'}:\n{server.tail()}")
        return 1
    except ServerFailed as exc:
        say(str(exc))
        return 1
    except KeyboardInterrupt:
        say("stopping…")
        return 0
    finally:
        server.stop()
        if server.stopped_cleanly:
            late = f" ({server.outlived_s:.1f} s after the server)" if server.outlived_s >= 1 else ""
            say(f"stopped cleanly: every process ended{late} and freed its shared memory")
        else:
            say(f"stopped; had to kill {server.forced_kills} and remove shared memory {server.removed_shm}")


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1:]))
