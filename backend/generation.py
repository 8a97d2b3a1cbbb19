"""Serving requests: decode in Triton's thread, generate on the engine loop, respond via the response thread.

Every request accepted here gets exactly one final response, whatever happens: a decoding error, an
unexpected exception, a cancelled generation task, an engine that dies, a stream that ends without a final
output, or an unload. Nothing raises out of `submit()`: an exception leaving Triton's `execute()` makes Triton
answer and free the request behind the backend's back.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import AsyncIterator, Callable
from typing import Any

from ..common.errors import (
    EngineBusy,
    EngineUnavailable,
    InternalError,
    InvalidRequest,
    RequestCancelled,
    RequestError,
)
from ..common.vllm_compat import request_errors
from .engine_runner import EngineRunner
from .lanes_behind import LanesBehind
from .lora import LoraRegistry
from .request_decoding import EmbedRequest, GenerateRequest, OutputOptions, RequestView, decode_request
from .response_encoding import chunk_from_embedding, chunk_from_output
from .response_thread import InflightRequest, Outcome, ResponseLanes, TritonIO
from .switch_interval import SwitchInterval
from .trace_attributes import Usage, describe, engine_trace_headers, request_id, start_span

UNLOADING = "the model is being unloaded; send the request again once it is loaded"
TASK_MISSING = {
    "embed": ("embedding_request: this model does not compute embeddings (its vLLM tasks: {tasks}); serve a pooling "
              "model (model.json \"runner\": \"pooling\") for embeddings"),
    "generate": ("text_input: this model computes embeddings and does not generate text (its vLLM tasks: {tasks}); "
                 "send embedding_request, e.g. {{\"input\": \"some text\"}}"),
}
NOT_DECOUPLED = ("stream: true needs a decoupled model, and this one is not (config.pbtxt sets "
                 "model_transaction_policy { decoupled: false }, which serves one response per request to infer() "
                 "and ensembles): send stream: false, or use a decoupled model for streaming")


class GenerationService:
    def __init__(
        self,
        runner: EngineRunner,
        io: TritonIO,
        lora: LoraRegistry,
        log: Any,
        on_finished: Callable[[InflightRequest, Outcome], None] | None = None,
        decoupled: bool = True,
        tracer: Any = None,
        model_name: str = "",
        trace_attributes: dict[str, Any] | None = None,
        exemplars: Callable[[tuple[int, int], Any], None] | None = None,
        response_threads: int = 1,
        switch_interval: SwitchInterval | None = None,
    ) -> None:
        from vllm.sampling_params import RequestOutputKind

        self._errors = request_errors()
        self._output_kind = RequestOutputKind
        self._runner = runner
        self._lora = lora
        self._log = log
        self._on_finished_hook = on_finished
        self._decoupled = decoupled  # if not, Triton accepts exactly one (final) response per request
        self._refusal: RequestError | None = None
        # tracing.spans.RequestTracer when tritonserver traces in OpenTelemetry mode, else None (no spans at all)
        self._tracer = tracer
        self._model_name = model_name  # in span names
        self._trace_attributes = trace_attributes or {}
        # metrics.exemplars.ExemplarStore.request_finished with OTLP metrics and tracing on: a traced request's
        # (trace id, span id) and vLLM's own timings of it (RequestOutput.metrics)
        self._exemplars = exemplars
        # how far the response threads are behind the engine: the switch interval (`auto`) hears it, metrics read it
        behind = LanesBehind(on_change=switch_interval.lanes_behind if switch_interval is not None else None)
        self.responses = ResponseLanes(response_threads, io, self._abort, self._finished, log.error, behind)

    # -- Triton's execute thread ----------------------------------------------------------------
    def submit(self, request: Any, view: RequestView) -> None:
        """Accept one request; it ends with exactly one final response, and nothing raises from here."""
        inflight = InflightRequest(request_id(view), request.get_response_sender(), OutputOptions())
        self.responses.register(inflight)
        try:
            if self._tracer is not None:
                inflight.span = start_span(self._tracer, view, inflight, self._trace_attributes)
            if self._refusal is not None:
                raise self._refusal
            decoded = decode_request(view)
            inflight.options = decoded.outputs
            if inflight.span is not None:
                describe(inflight.span, decoded, self._model_name)
            if isinstance(decoded, EmbedRequest):
                self._check_task("embed")
                self._runner.submit(self._embed(decoded, inflight))
                return
            self._check_task("generate")
            if decoded.stream and not self._decoupled:
                raise InvalidRequest(NOT_DECOUPLED)
            self._lora.check(decoded.sampling.lora_name)
            self._runner.submit(self._generate(decoded, inflight))
        except RequestError as error:
            self.responses.send_error(inflight, error)
        except Exception as exc:  # a bug or a library's surprise: this request fails, nothing else does
            self.responses.send_error(inflight, self._internal(inflight, "accepting the request", exc))

    def _check_task(self, task: str) -> None:
        tasks = self._runner.supported_tasks
        if task in tasks or not tasks:
            return
        raise InvalidRequest(TASK_MISSING[task].format(tasks=", ".join(tasks)))

    def inflight_count(self) -> int:
        return len(self.responses.inflight())

    def refuse_new_requests(self, error: RequestError | None) -> None:
        """While set, every new request fails fast with this error (the health monitor and unload set it)."""
        self._refusal = error

    def fail_inflight(self, error: RequestError) -> None:
        """End every in-flight request with `error` now, and drop them from the engine."""
        for inflight in self.responses.inflight():
            self.responses.send_error(inflight, error)
            self._abort(inflight)

    # -- the engine loop ------------------------------------------------------------------------
    async def _generate(self, request: GenerateRequest, inflight: InflightRequest) -> None:
        params = request.sampling.params
        params.output_kind = self._output_kind.DELTA if request.stream else self._output_kind.FINAL_ONLY
        prefix = ""
        if request.prepend_input:
            prefix = request.prompt if isinstance(request.prompt, str) else request.prompt["prompt"]

        def start(engine: Any) -> AsyncIterator[Any]:
            return engine.generate(request.prompt, params, inflight.request_id,
                                   lora_request=self._lora.request_for(request.sampling.lora_name),
                                   trace_headers=engine_trace_headers(self._tracer, inflight.span))

        def each(output: Any) -> None:
            if request.stream:
                self.responses.send_chunk(inflight, chunk_from_output(output, params.n,
                                                                      logprobs=request.client_logprobs))

        def final(output: Any) -> None:
            if not request.stream:
                self.responses.send_chunk(inflight, chunk_from_output(output, params.n, prefix,
                                                                      logprobs=request.client_logprobs))

        await self._serve(inflight, start, each, final)

    async def _embed(self, request: EmbedRequest, inflight: InflightRequest) -> None:
        from vllm import PoolingParams

        params = PoolingParams(task="embed", dimensions=request.dimensions, use_activation=request.use_activation)
        await self._serve(inflight, lambda engine: engine.encode(
                              request.prompt, params, inflight.request_id,
                              trace_headers=engine_trace_headers(self._tracer, inflight.span)),
                          lambda output: None,
                          lambda output: self.responses.send_chunk(inflight, chunk_from_embedding(output)))

    async def _serve(self, inflight: InflightRequest, start: Callable[[Any], AsyncIterator[Any]],
                     each: Callable[[Any], None], final: Callable[[Any], None]) -> None:
        """Run one engine request to its final output; on any failure, end it with one specific error."""
        last = None
        error: RequestError = InternalError(f"generation stopped unexpectedly (request id {inflight.request_id})")
        try:
            if inflight.cancelled:  # noticed before the request reached the engine: it never starts
                raise RequestCancelled.by_client()
            engine = self._runner.engine
            if engine is None:
                raise EngineUnavailable("the engine is restarting")
            span = inflight.span
            usage = Usage() if span is not None else None
            if span is not None:
                span.event("submitted to the engine")
            async for output in start(engine):
                if usage is not None:
                    if last is None:
                        span.event("first token")
                    usage.add(output)
                last = output
                each(output)
            if last is not None and last.finished:
                if usage is not None:
                    span.set(usage.attributes(last))
                    if self._exemplars is not None:
                        self._exemplars(span.ids(), getattr(last, "metrics", None))
                final(last)
                return
            self._log.error(f"request {inflight.request_id}: vLLM's output stream ended without a final output")
            error = InternalError(f"generation ended without a final output (request id {inflight.request_id})")
        except asyncio.CancelledError:
            error = EngineUnavailable(UNLOADING)
            raise
        except Exception as exc:  # every failure ends this request only, with a specific error
            error = self._classify(exc, inflight, started=last is not None)
        finally:
            if last is None or not last.finished:
                self.responses.send_error(inflight, error)

    def _classify(self, exc: BaseException, inflight: InflightRequest, started: bool) -> RequestError:
        errors = self._errors
        exc = errors.cause(exc)
        if isinstance(exc, RequestError):
            return exc
        if isinstance(exc, errors.retryable):
            return EngineBusy(f"the vLLM engine did not take this request: {exc} ({type(exc).__name__}); the "
                              "engine is healthy, and a retry may succeed")
        if isinstance(exc, errors.client) or (isinstance(exc, ValueError) and not started):
            return InvalidRequest(str(exc))
        if isinstance(exc, errors.dead):
            return EngineUnavailable("the vLLM engine is dead; the health monitor replaces or unloads it if on")
        if isinstance(exc, errors.generation):
            self._log.error(f"request {inflight.request_id}: vLLM failed to generate it: {type(exc).__name__}: "
                            f"{exc}")
            return InternalError(f"vLLM failed to generate this request: {exc} (request id "
                                 f"{inflight.request_id}); the engine is healthy and serves other requests")
        return self._internal(inflight, "generating", exc)

    def _internal(self, inflight: InflightRequest, doing: str, exc: BaseException) -> RequestError:
        """Log the whole story with the request id; tell the client only what it can act on."""
        detail = "".join(traceback.format_exception(exc)).rstrip()
        self._log.error(f"request {inflight.request_id}: unexpected error while {doing}:\n{detail}")
        return InternalError(f"internal error while {doing} ({type(exc).__name__}); the server log has the "
                             f"details under request id {inflight.request_id}")

    def _abort(self, inflight: InflightRequest) -> None:
        engine = self._runner.engine
        if engine is not None:
            self._runner.submit(self._abort_in_engine(engine, inflight))

    async def _abort_in_engine(self, engine: Any, inflight: InflightRequest) -> None:
        """A client's cancellation is logged with the official backend's lines ("[vllm] Cancelling the request"), at
        its level (info)."""
        if not inflight.cancelled:  # the backend's own abort (a failed send, an unload): no cancel lines
            await engine.abort(inflight.request_id)
            return
        self._log.info(f"Cancelling the request (request id {inflight.request_id})")
        await engine.abort(inflight.request_id)
        self._log.info(f"Successfully cancelled the request (request id {inflight.request_id})")

    def _finished(self, inflight: InflightRequest, outcome: Outcome) -> None:
        if inflight.span is not None:
            inflight.span.end(outcome.value, inflight.error.message if inflight.error is not None else None)
        if self._on_finished_hook is not None:
            self._on_finished_hook(inflight, outcome)

    # -- unload --------------------------------------------------------------------------------------
    def drain(self, timeout_s: float) -> int:
        """Refuse new requests and let in-flight ones finish for up to `timeout_s`; end the rest with an error.

        Returns how many had to be aborted."""
        self.refuse_new_requests(EngineUnavailable(UNLOADING))
        self.responses.wait_all_answered(timeout_s)
        left = self.responses.inflight()
        if left:
            self.fail_inflight(EngineUnavailable(
                f"the model is being unloaded and this request did not finish within {timeout_s:g} s "
                "(UNLOAD_DRAIN_TIMEOUT_S)"))
            self._log.warn(f"unloading: {len(left)} request(s) did not finish within {timeout_s:g} s and were "
                           "aborted")
        return len(left)

    def close(self) -> None:
        """After `drain()`: shut the engine down and stop the response thread once everything was answered."""
        self.fail_inflight(EngineUnavailable(UNLOADING))
        self._runner.shutdown()
        self.responses.stop()
