"""Owns vLLM's `AsyncLLM` on a dedicated asyncio event loop thread.

Triton calls `execute()` on its own thread; vLLM's AsyncLLM needs a running event loop for its output
handler. Everything that touches a running engine runs on this loop; other threads hand it coroutines.

Building an engine takes tens of seconds and blocks, so it runs on a thread of its own: the loop keeps
serving (and answering "restarting") meanwhile; the new engine's output handler is then started on this loop.
An engine that arrives after its start timed out, or after shutdown began, is shut down — never left running
without an owner. A new engine serves one warm-up request (`engine_warm_up`) before anyone else may use it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import shutil
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import psutil  # a dependency of vLLM, so present wherever the backend runs

from ..common.engine_activity import EngineActivity
from ..common.errors import ConfigError
from ..common.vllm_compat import shared_engine_client, shutdown_grace, watch_engine_core
from .engine_share import EngineShare, OwnersEngine
from .engine_shm import mapped_segments, unlink_left_behind
from .engine_warm_up import needs_warm_up, warm_up_request
from .ipc_dir import IpcDirectory
from .parent_watch import engine_processes
from .process_progress import process_progress_s

T = TypeVar("T")
SHUTDOWN_TIMEOUT_S = 60.0
# For vLLM's orderly shutdown, before it force-kills what is left: on two cores an idle engine's takes 7.5-9 s and a
# busy machine's more than 15 s (docs/health.md, "Shutdown"); a force-kill is for an EngineCore that is stuck.
ENGINE_SHUTDOWN_GRACE_S = 30.0
# vLLM's wait for its workers to exit before it signals them (its default: 5 s; a worker's teardown alone takes
# ≈ 4.5 s on two idle cores)
WORKER_SHUTDOWN_GRACE_S = "20"  # VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS unless set (backend.plan)


def _children(process: psutil.Process) -> list[psutil.Process]:
    try:
        return process.children(recursive=True)
    except psutil.Error:
        return []


class EngineStartError(ConfigError):
    """The engine did not start; the model load fails with this message."""


class EngineRunner:
    def __init__(self, engine_args: Any, stat_loggers: list[Any] | None = None,
                 start_timeout_s: float = 600.0, log_info: Callable[[str], None] | None = None,
                 own_trace_headers: dict[str, str] | None = None, ipc: IpcDirectory | None = None,
                 activity: EngineActivity | None = None, share: EngineShare | None = None,
                 others_leave_s: float = 0.0) -> None:
        self._engine_args = engine_args
        self._stat_loggers = stat_loggers or None
        self._start_timeout_s = start_timeout_s
        self._log_info = log_info or (lambda _message: None)
        # vLLM's trace_headers for the backend's own requests (warm-up, health probe): "not sampled" when vLLM
        # traces, so that no client-less trace appears.
        self._own_trace_headers = own_trace_headers
        # Says when the engine serves a request of the backend's own (a warm-up, a recovery check), when no client
        # request runs beside it: the metrics leave it out.
        self.activity = activity or EngineActivity()
        # The backend's own requests (warm-up, health probe) in flight: a shutdown cancels them.
        self._own_requests: set[concurrent.futures.Future[None]] = set()
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name="vllm-engine-loop", daemon=True)
        self._lock = threading.Lock()
        self._closed = False
        self._building: concurrent.futures.Future[Any] | None = None
        self.engine: Any = None
        # What the model does, from vLLM ("generate", "embed", …): decides which requests it can serve.
        self.supported_tasks: tuple[str, ...] = ()
        # Each engine's IPC socket directory (backend.ipc_dir), removed once that engine is shut down
        self._ipc = ipc
        self._ipc_paths: dict[int, Path] = {}
        # Each running engine's /dev/shm segments (backend.engine_shm): unlinked after it is shut down if left
        self._segments: dict[int, set[str]] = {}
        # SHARED_ENGINE: this instance's place among the clients of the model's one engine (backend.engine_share);
        # its owner starts and shuts down the engine, after the others have left (at most `others_leave_s`)
        self._share = share
        self._others_leave_s = others_leave_s

    @property
    def owns_engine(self) -> bool:
        """This instance's engine is its own (its child processes): it starts, restarts and shuts it down."""
        return self._share is None or self._share.owner

    def _engine_processes(self) -> list[psutil.Process]:
        """The EngineCore processes: children of this stub, or of the owner of a shared engine (none while it is
        gone)."""
        try:
            parent = psutil.Process() if self.owns_engine else psutil.Process(self._share.owner_pid())
        except psutil.Error:
            return []
        return engine_processes(parent)

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def start(self) -> None:
        """Start the loop and the first engine; raise with the cause, at the latest after the start timeout."""
        self._thread.start()
        try:
            self._build()
        except Exception as exc:
            self._stop_loop()
            raise exc if isinstance(exc, EngineStartError) else EngineStartError(
                f"the vLLM engine failed to start: {type(exc).__name__}: {exc}") from exc

    def restart(self) -> None:
        """Shut the current engine (and its processes) down and build a new one; the loop keeps running."""
        with self._lock:
            old, self.engine = self.engine, None
        if old is not None:
            self._shutdown_engine(old)
        self._build()

    def _build(self) -> None:
        """Build an engine, attach it to the loop and warm it up; only then is it `self.engine`.

        Until that moment `_building` holds its future, so a shutdown() meanwhile waits for it and shuts it down."""
        with self._lock:
            if self._closed:
                raise EngineStartError("the model is being unloaded")
            future: concurrent.futures.Future[Any] = concurrent.futures.Future()
            self._building = future
        timeout = self._start_timeout_s  # ENGINE_START_TIMEOUT_S, for the start and the warm-up together
        deadline = time.monotonic() + timeout
        threading.Thread(target=self._create, args=(future,), name="vllm-engine-start", daemon=True).start()
        try:
            engine = future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.add_done_callback(self._discard_late)  # shut it down when it arrives
            raise EngineStartError(f"the vLLM engine did not start within {timeout:g} s (ENGINE_START_TIMEOUT_S); "
                                   "the server log shows how far it got") from None
        failure: Exception | None = None
        try:
            if not self._closed:
                self.supported_tasks = self.call(self._attach(engine), timeout=SHUTDOWN_TIMEOUT_S)
                self._warm_up(engine, deadline)
        except Exception as exc:
            failure = exc
            if not self._closed:  # else shutdown() has shut it down (and is stopping the loop)
                self._shutdown_engine(engine)
        with self._lock:
            self._building = None
            closed = self._closed
            if not closed and failure is None:
                self.engine = engine
                if self.owns_engine:
                    self._segments[id(engine)] = self._engine_segments()
                return
        if closed:  # shutdown() began meanwhile and waits for this engine: it shuts it down
            raise EngineStartError("the model was unloaded while the engine was starting")
        if isinstance(failure, TimeoutError):
            raise EngineStartError(f"the vLLM engine started but did not serve its warm-up request within "
                                   f"{timeout:g} s of its start (ENGINE_START_TIMEOUT_S)") from failure
        raise EngineStartError(f"the vLLM engine started but failed its warm-up: {type(failure).__name__}: "
                               f"{failure}") from failure

    @staticmethod
    async def _attach(engine: Any) -> tuple[str, ...]:
        """Start the engine's output handling on this loop now, as AsyncLLM does when it is built inside a running
        loop: messages from the EngineCore (probe answers, a failed executor) are read from the first moment.
        Returns the tasks the model supports."""
        engine._run_output_handler()
        return tuple(await engine.get_supported_tasks())

    def _warm_up(self, engine: Any, deadline: float) -> None:
        if not needs_warm_up(engine, self.supported_tasks):
            return
        prompt, params, request_id = warm_up_request()
        start = time.monotonic()
        self._serve_one(engine, lambda: engine.generate(prompt, params, request_id,
                                                        trace_headers=self._own_trace_headers),
                        request_id, max(1.0, deadline - start))
        self._log_info(f"engine warm-up: one request with logprobs served in {time.monotonic() - start:.1f} s "
                       "(vLLM builds its logprobs kernel on first use; the compile cache makes later starts faster)")

    def _create(self, future: concurrent.futures.Future[Any]) -> None:
        """On the start thread: whatever fails here — vLLM's own import included (a module of it missing, as
        xgrammar's tvm_ffi once was on the GPU host) — fails the start with its cause, never leaves it waiting."""
        path = self._ipc.for_next_engine() if self._ipc is not None else None
        try:
            from vllm.usage.usage_lib import UsageContext
            from vllm.v1.engine.async_llm import AsyncLLM

            # A server's defaults, as `vllm serve` has them: AsyncLLM's own (ENGINE_CONTEXT) leave max_num_seqs at
            # 128 and max_num_batched_tokens at 2048 on every GPU, where `vllm serve` runs 1024 and 8192 on an
            # H100/H200 — more streams than 128 queued behind the first, long prompts prefilled in many steps
            # (docs/benchmarks.md, "The engine's defaults"). model.json's values still win.
            if self._share is None:
                engine = AsyncLLM.from_engine_args(self._engine_args, usage_context=UsageContext.OPENAI_API_SERVER,
                                                   stat_loggers=self._stat_loggers)
            else:
                engine = self._shared_client(UsageContext.OPENAI_API_SERVER)
            if path is not None:
                self._ipc_paths[id(engine)] = path
            future.set_result(engine)
        except BaseException as exc:
            if path is not None:
                shutil.rmtree(path, ignore_errors=True)
            future.set_exception(exc)

    def _shared_client(self, usage_context: Any) -> Any:
        """A client of the model's one engine (SHARED_ENGINE) with this instance's sockets: the owner first starts
        the engine for every instance (returning once it is ready), each other instance waits in vLLM's client for
        the engine's ready message — within the start timeout, as any start."""
        share = self._share
        engine, manager = shared_engine_client(self._engine_args, usage_context, self._stat_loggers,
                                               *share.addresses(), index=share.index, launch=share.owner)
        watch_engine_core(engine, manager or OwnersEngine([p.pid for p in self._engine_processes()]))
        return engine

    def _discard_late(self, future: concurrent.futures.Future[Any]) -> None:
        with self._lock:
            if self._building is future:
                self._building = None
        if future.exception() is None:
            self._shutdown_engine(future.result())

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return self.submit(coro).result(timeout)

    # -- what the health monitor asks of an engine (health.ports.Engine) ---------------------------------
    def running(self) -> bool:
        return self.engine is not None

    def dead_reason(self) -> str | None:
        engine = self.engine
        if engine is None or not getattr(engine, "errored", False):
            return None
        return str(getattr(engine, "dead_error", "EngineCore died"))

    def start_probe(self, timeout_s: float) -> concurrent.futures.Future[float]:
        """vLLM's own `check_health()` (what the official backend asks: it raises once the engine is dead), then
        `is_sleeping`, a round trip through the EngineCore's input and output queues that does no work; both
        within one bound. A failure of either is a failed probe."""
        engine = self.engine

        async def both() -> None:
            await engine.check_health()
            await engine.is_sleeping()

        async def probe() -> float:
            start = time.monotonic()
            await asyncio.wait_for(both(), timeout_s)
            return time.monotonic() - start

        return self.submit(probe())

    @staticmethod
    def _engine_segments() -> set[str]:
        """What the running engine's processes (the EngineCore and its workers) map under /dev/shm."""
        cores = engine_processes(psutil.Process())
        pids = [p.pid for core in cores for p in [core, *_children(core)]]
        return mapped_segments(pids)

    def progress(self) -> float:
        """Seconds the EngineCore processes' threads, which answer a probe, have run or waited for a CPU
        (backend.process_progress). Standing still while a probe waits means hung, not busy. (Not this stub's
        loop thread: vLLM's periodic stats logging runs there whatever the engine does.)"""
        return sum(process_progress_s(p.pid) for p in self._engine_processes())

    def generate_one_token(self, timeout_s: float) -> None:
        """A real request through the whole engine: one generated token, or one embedding for a pooling model."""
        from vllm import PoolingParams, SamplingParams

        engine = self.engine
        request_id = f"health-probe-{uuid.uuid4().hex}"

        def outputs() -> AsyncIterator[Any]:
            if "generate" in self.supported_tasks or "embed" not in self.supported_tasks:
                return engine.generate("health probe", SamplingParams(max_tokens=1), request_id,
                                       trace_headers=self._own_trace_headers)
            return engine.encode("health probe", PoolingParams(task="embed"), request_id)

        self._serve_one(engine, outputs, request_id, timeout_s)

    def _serve_one(self, engine: Any, outputs: Callable[[], AsyncIterator[Any]], request_id: str,
                   timeout_s: float) -> None:
        """Run one request of the backend's own to its end on the loop; abort it in the engine if it fails.

        Only while no client request runs (a new engine nobody has yet, an unhealthy one that refuses requests)."""
        async def consume() -> None:
            async for _ in outputs():
                pass

        async def bounded() -> None:
            try:
                await asyncio.wait_for(consume(), timeout_s)
            except BaseException:
                await engine.abort(request_id)
                raise

        with self.activity.own_request():
            future = self.submit(bounded())
            with self._lock:
                self._own_requests.add(future)
            try:
                future.result(timeout_s + 1)
            finally:
                with self._lock:
                    self._own_requests.discard(future)

    def shutdown(self) -> None:
        """Shut every engine down — the current one and one still starting — then stop the loop."""
        with self._lock:
            self._closed = True
            building = self._building
            engine, self.engine = self.engine, None
        if engine is not None:
            if self._share is not None and self._share.owner:
                left = self._share.wait_for_others(self._others_leave_s)
                if left:
                    self._log_info(f"shutting the shared engine down while {len(left)} other instance(s) still use "
                                   f"it (processes {', '.join(map(str, left))}): they did not leave within "
                                   f"{self._others_leave_s:g} s")
            self._shutdown_engine(engine)
        if building is not None:
            try:
                late = building.result(self._start_timeout_s)
            except Exception:
                late = None
            if late is not None:
                self._shutdown_engine(late)
        with self._lock:
            own = list(self._own_requests)
        for future in own:  # e.g. a warm-up on the engine just shut down, which may never answer now
            future.cancel()
        self._stop_loop()

    def _shutdown_engine(self, engine: Any) -> None:
        """On the loop when it runs (the output handler lives there), else here; never raises.

        vLLM force-kills an EngineCore that has not exited within its grace period (5 s unless told), and an
        orderly one takes longer than that on two cores (its worker ≈ 4.5 s, then its own collection and exit): so it
        is given ENGINE_SHUTDOWN_GRACE_S, where the release lets it be told."""
        grace = shutdown_grace(engine, ENGINE_SHUTDOWN_GRACE_S)

        async def shutdown() -> None:
            engine.shutdown(**grace)

        started = time.monotonic()
        try:
            if self._thread.is_alive():
                self.call(shutdown(), timeout=SHUTDOWN_TIMEOUT_S)
            else:
                engine.shutdown(**grace)
        except Exception:
            pass
        self._log_info(f"engine shut down in {time.monotonic() - started:.1f} s")
        path = self._ipc_paths.pop(id(engine), None)
        if path is not None:  # its processes are gone: nobody uses these sockets any more
            shutil.rmtree(path, ignore_errors=True)
        left = unlink_left_behind(self._segments.pop(id(engine), set()))
        if left:
            self._log_info(f"unlinked the shared memory the engine left behind: {', '.join(left)}")

    def _stop_loop(self) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(30)
