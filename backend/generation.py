"""Serving requests: decode in Triton's thread, generate on the engine loop, respond via the response thread."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

from backend.engine_runner import EngineRunner
from backend.errors import EngineUnavailable, InvalidRequest, RequestError
from backend.lora import LoraRegistry
from backend.request_decoding import GenerateRequest, RequestView, decode_request
from backend.response_encoding import chunk_from_output
from backend.response_thread import InflightRequest, Outcome, ResponseThread, TritonIO


class GenerationService:
    def __init__(
        self,
        runner: EngineRunner,
        io: TritonIO,
        lora: LoraRegistry,
        log: Any,
        on_finished: Callable[[InflightRequest, Outcome], None] | None = None,
    ) -> None:
        from vllm.exceptions import VLLMClientError
        from vllm.sampling_params import RequestOutputKind
        from vllm.v1.engine.exceptions import EngineDeadError

        self._client_error = VLLMClientError
        self._dead_error = EngineDeadError
        self._output_kind = RequestOutputKind
        self._runner = runner
        self._lora = lora
        self._log = log
        self._on_finished_hook = on_finished
        self._refusal: RequestError | None = None
        self.responses = ResponseThread(io, self._abort, self._finished, log.error)

    # -- Triton's execute thread ----------------------------------------------------------------
    def submit(self, request: Any, view: RequestView) -> None:
        inflight = InflightRequest(uuid.uuid4().hex, request.get_response_sender(), None, False)
        self.responses.register(inflight)
        try:
            if self._refusal is not None:
                raise self._refusal
            decoded = decode_request(view)
            self._lora.check(decoded.sampling.lora_name)
        except RequestError as error:
            self.responses.send_error(inflight, error)
            return
        inflight.options, inflight.stream = decoded.outputs, decoded.stream
        self._runner.submit(self._generate(decoded, inflight))

    def refuse_new_requests(self, error: RequestError | None) -> None:
        """While set, every new request fails fast with this error (the health monitor sets it)."""
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
        last = None
        try:
            engine = self._runner.engine
            if engine is None:
                raise EngineUnavailable("the engine is restarting")
            outputs = engine.generate(
                request.prompt, params, inflight.request_id,
                lora_request=self._lora.request_for(request.sampling.lora_name),
            )
            async for output in outputs:
                last = output
                if request.stream:
                    self.responses.send_chunk(
                        inflight, chunk_from_output(output, params.n, logprobs=request.client_logprobs))
            if not request.stream and last is not None:
                self.responses.send_chunk(
                    inflight, chunk_from_output(last, params.n, prefix, logprobs=request.client_logprobs))
        except Exception as exc:  # every failure ends this request only, with a specific error
            self.responses.send_error(inflight, self._classify(exc, started=last is not None))

    def _classify(self, exc: BaseException, started: bool) -> RequestError:
        if isinstance(exc, RequestError):
            return exc
        if isinstance(exc, self._client_error) or (isinstance(exc, ValueError) and not started):
            return InvalidRequest(str(exc))
        if isinstance(exc, self._dead_error):
            return EngineUnavailable(f"the vLLM engine is dead: {exc}")
        if isinstance(exc, asyncio.CancelledError):
            return EngineUnavailable("the model is shutting down")
        cause = exc.__cause__ or exc
        self._log.error(f"generation failed: {type(cause).__name__}: {cause}")
        return RequestError(f"generation failed: {type(cause).__name__}: {cause}")

    def _abort(self, inflight: InflightRequest) -> None:
        engine = self._runner.engine
        if engine is not None:
            self._runner.submit(engine.abort(inflight.request_id))

    async def abort_all(self) -> None:
        ids = [r.request_id for r in self.responses.inflight()]
        if ids and self._runner.engine is not None:
            await self._runner.engine.abort(ids)

    def _finished(self, inflight: InflightRequest, outcome: Outcome) -> None:
        if self._on_finished_hook is not None:
            self._on_finished_hook(inflight, outcome)

    def close(self) -> None:
        self.refuse_new_requests(EngineUnavailable("the model is being unloaded"))
        self.fail_inflight(EngineUnavailable("the model is being unloaded"))
        self._runner.shutdown(self.abort_all)
        self.responses.stop()
