"""Owns vLLM's `AsyncLLM` on a dedicated asyncio event loop thread.

Triton calls `execute()` on its own thread; vLLM's AsyncLLM needs a running event loop for its output
handler. Everything that touches the engine runs on this loop; other threads hand it coroutines.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from backend.errors import ConfigError

T = TypeVar("T")


class EngineStartError(ConfigError):
    """The engine did not start; the model load fails with this message."""


class EngineRunner:
    def __init__(self, engine_args: Any, stat_loggers: list[Any] | None = None) -> None:
        self._engine_args = engine_args
        self._stat_loggers = stat_loggers or None
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name="vllm-engine-loop", daemon=True)
        self.engine: Any = None

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def start(self) -> None:
        """Create the engine on the loop (vLLM starts its output handler there); raise with the cause."""
        self._thread.start()
        try:
            self.engine = self.call(self._create())
        except Exception as exc:
            self._stop_loop()
            raise EngineStartError(f"the vLLM engine failed to start: {type(exc).__name__}: {exc}") from exc

    async def _create(self) -> Any:
        from vllm.v1.engine.async_llm import AsyncLLM

        return AsyncLLM.from_engine_args(self._engine_args, stat_loggers=self._stat_loggers)

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return self.submit(coro).result(timeout)

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        self.loop.call_soon_threadsafe(fn, *args)

    def shutdown(self, abort_all: Callable[[], Awaitable[None]] | None = None) -> None:
        """Abort what is left, shut the engine (and its processes) down, stop the loop."""
        if self.engine is not None and self._thread.is_alive():
            if abort_all is not None:
                try:
                    self.call(abort_all(), timeout=10)
                except Exception:
                    pass
            try:
                self.call(self._shutdown_engine(), timeout=60)
            except Exception:
                pass
        self.engine = None
        self._stop_loop()

    def restart(self, start_timeout: float = 600.0) -> None:
        """Shut the current engine (and its processes) down and start a new one on the same loop."""
        old, self.engine = self.engine, None
        if old is not None:
            self.call(self._shutdown(old), timeout=60)
        self.engine = self.call(self._create(), timeout=start_timeout)

    async def _shutdown_engine(self) -> None:
        await self._shutdown(self.engine)

    @staticmethod
    async def _shutdown(engine: Any) -> None:
        engine.shutdown()

    def _stop_loop(self) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(30)
