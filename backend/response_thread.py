"""The threads that talk to Triton's response senders.

Sending a response is an IPC round trip to the Triton server; doing it on the engine's event loop would
stall vLLM's output handling. The engine side only enqueues plain chunks; a response thread turns them into
responses, merges a stream's pending chunks into one response when the client falls behind, polls for
client cancellation, and tracks which requests are still in flight.

One thread sends one response at a time, and each waits for the server's answer (pb_utils releases the GIL
meanwhile): when a step gives 64 streams their first tokens, the 64th waits for 63 round trips. So there may be
several (config.pbtxt `RESPONSE_THREADS`, `ResponseLanes`), each request on one of them, so that its responses
stay in order and only its own thread ever touches its sender (is_cancelled() included).
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..common.errors import InternalError, RequestCancelled, RequestError
from ..common.owned_thread import JOIN_TIMEOUT_S, OwnedThread
from ..common.vocabulary import Outcome
from .lanes_behind import LanePace, LanesBehind
from .request_decoding import OutputOptions
from .response_encoding import ResponseChunk


class TritonIO(Protocol):
    """What this thread needs from Triton (pb_utils in production, a fake in unit tests)."""

    final_flag: int

    def response(self, chunk: ResponseChunk, options: OutputOptions) -> Any: ...

    def error_response(self, error: RequestError) -> Any: ...


@dataclass(eq=False)
class InflightRequest:
    request_id: str
    sender: Any
    options: OutputOptions
    cancelled: bool = False
    done: bool = False
    error: RequestError | None = None  # the error the request ended with, if any
    span: Any = None  # its trace span, when the request is traced
    responded: bool = False  # a response has been sent (the span's "first response sent" event)
    lane: ResponseThread | None = None  # the response thread it is on (ResponseLanes)


@dataclass
class _Item:
    request: InflightRequest
    chunk: ResponseChunk | None = None
    error: RequestError | None = None


class ResponseThread:
    def __init__(
        self,
        io: TritonIO,
        on_cancel: Callable[[InflightRequest], None],
        on_finished: Callable[[InflightRequest, Outcome], None],
        log_error: Callable[[str], None],
        cancel_poll_s: float = 0.5,
        name: str = "vllm-responses",
        pace: LanePace | None = None,
    ) -> None:
        self._io = io
        self._pace = pace or LanePace(LanesBehind())  # says when this thread is behind the engine
        self._on_cancel = on_cancel
        self._on_finished = on_finished
        self._log_error = log_error
        self._cancel_poll_s = cancel_poll_s
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._inflight: dict[str, InflightRequest] = {}
        self._lock = threading.Lock()
        self._all_answered = threading.Condition(self._lock)  # notified when the last in-flight request ends
        # ends at the None it is sent, once everything queued before it is delivered
        self._thread = OwnedThread(self._run, name, wake=self.close)
        self._thread.start()

    # -- called from any thread ------------------------------------------------------------------
    def register(self, request: InflightRequest) -> None:
        with self._lock:
            self._inflight[request.request_id] = request

    def send_chunk(self, request: InflightRequest, chunk: ResponseChunk) -> None:
        self._queue.put(_Item(request, chunk=chunk))

    def send_error(self, request: InflightRequest, error: RequestError) -> None:
        self._queue.put(_Item(request, error=error))

    def inflight(self) -> list[InflightRequest]:
        with self._lock:
            return list(self._inflight.values())

    def wait_all_answered(self, timeout_s: float) -> bool:
        """Whether every registered request got its final response within `timeout_s` (the unload's drain)."""
        with self._all_answered:
            return self._all_answered.wait_for(lambda: not self._inflight, max(0.0, timeout_s))

    def stop(self, timeout: float | None = None) -> None:
        self._thread.stop(timeout)

    def close(self) -> None:
        """Let the thread end once it has sent what is queued (stop() also waits for it)."""
        self._queue.put(None)

    # -- the thread ------------------------------------------------------------------------------
    def _run(self) -> None:
        last_poll = time.monotonic()
        while True:
            try:
                first = self._queue.get(timeout=self._cancel_poll_s)
            except queue.Empty:
                first = ...
            batch = [] if first is ... else [first]
            while True:  # take whatever else is already waiting, to merge stream chunks
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            self._pace.batch_taken()
            for item in self._coalesce([i for i in batch if i is not None]):
                self._pace.before_send()
                try:
                    self._deliver(item)
                except Exception as exc:  # this thread serves every request: it must outlive any one of them
                    self._log_error(f"delivering a response for request {item.request.request_id} "
                                    f"failed: {type(exc).__name__}: {exc}")
            self._pace.batch_sent(more_waiting=not self._queue.empty())
            if None in batch:
                return
            if time.monotonic() - last_poll >= self._cancel_poll_s:
                self._poll_cancellation()
                last_poll = time.monotonic()

    @staticmethod
    def _coalesce(items: list[_Item]) -> list[_Item]:
        """Merge consecutive pending chunks of one stream; order per request is kept."""
        merged: list[_Item] = []
        open_chunk: dict[int, _Item] = {}
        for item in items:
            key = id(item.request)
            pending = open_chunk.get(key)
            if item.chunk is not None and pending is not None and pending.chunk is not None:
                pending.chunk.merge(item.chunk)
                continue
            merged.append(item)
            open_chunk[key] = item if item.chunk is not None and not item.chunk.finished else None
        return merged

    def _deliver(self, item: _Item) -> None:
        request = item.request
        if request.done:
            return  # already ended (e.g. failed by the health monitor); late engine output is dropped
        error = item.error
        final = error is not None or (item.chunk is not None and item.chunk.finished)
        if item.chunk is not None and item.chunk.finished and request.cancelled:
            error = RequestCancelled.by_client()
        try:
            response = (
                self._io.error_response(error) if error is not None
                else self._io.response(item.chunk, request.options)
            )
            request.sender.send(response, flags=self._io.final_flag if final else 0)
            if not request.responded and request.span is not None:
                request.span.event("first response sent")  # the first token's last step inside the backend
            request.responded = True
        except Exception as exc:  # a broken sender must not stop the thread serving everyone else
            self._log_error(f"sending a response for request {request.request_id} failed: {exc}")
            final = True
            error = error or InternalError(f"the response could not be sent ({type(exc).__name__}); the server "
                                           f"log has the details under request id {request.request_id}")
            try:  # the request must still end: a final error response, if the sender works at all
                request.sender.send(self._io.error_response(error), flags=self._io.final_flag)
            except Exception:
                pass
            if item.chunk is not None and not item.chunk.finished:
                self._abort(request)  # nobody will read the rest: stop generating it
        if final:
            request.done = True
            request.error = error
            with self._lock:
                self._inflight.pop(request.request_id, None)
                if not self._inflight:
                    self._all_answered.notify_all()
            try:
                self._on_finished(request, Outcome.COMPLETED if error is None else error.outcome)
            except Exception as exc:
                self._log_error(f"counting the end of request {request.request_id} failed: {exc}")

    def _poll_cancellation(self) -> None:
        """On the sending thread on purpose: once a final response is sent Triton frees the request, and
        is_cancelled() on it from another thread could reach freed memory in the server (it crashed Triton)."""
        for request in self.inflight():
            if request.cancelled or request.done:
                continue
            try:
                cancelled = request.sender.is_cancelled()
            except Exception:
                cancelled = False
            if cancelled:
                request.cancelled = True
                self._abort(request)

    def _abort(self, request: InflightRequest) -> None:
        try:
            self._on_cancel(request)
        except Exception as exc:
            self._log_error(f"aborting request {request.request_id} in the engine failed: {exc}")


class ResponseLanes:
    """`count` response threads behind one ResponseThread's interface; each request is on one of them, in turn."""

    def __init__(self, count: int, io: TritonIO, on_cancel: Callable[[InflightRequest], None],
                 on_finished: Callable[[InflightRequest, Outcome], None], log_error: Callable[[str], None],
                 behind: LanesBehind | None = None) -> None:
        self.behind = behind or LanesBehind()
        self._lanes = [ResponseThread(io, on_cancel, on_finished, log_error,
                                      name="vllm-responses" if count == 1 else f"vllm-responses-{i}",
                                      pace=LanePace(self.behind))
                       for i in range(count)]
        self._turn = itertools.count()

    def register(self, request: InflightRequest) -> None:
        request.lane = self._lanes[next(self._turn) % len(self._lanes)]
        request.lane.register(request)

    def send_chunk(self, request: InflightRequest, chunk: ResponseChunk) -> None:
        (request.lane or self._lanes[0]).send_chunk(request, chunk)

    def send_error(self, request: InflightRequest, error: RequestError) -> None:
        (request.lane or self._lanes[0]).send_error(request, error)

    def inflight(self) -> list[InflightRequest]:
        return [request for lane in self._lanes for request in lane.inflight()]

    def wait_all_answered(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        return all(lane.wait_all_answered(deadline - time.monotonic()) for lane in self._lanes)

    def stop(self, timeout: float = JOIN_TIMEOUT_S) -> None:
        """Every lane told first, then each waited for: one bound for all of them."""
        for lane in self._lanes:
            lane.close()
        deadline = time.monotonic() + timeout
        for lane in self._lanes:
            lane.stop(max(0.0, deadline - time.monotonic()))
