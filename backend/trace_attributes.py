"""What a request's trace span says: OpenTelemetry GenAI semantic-convention attributes from the request and from
vLLM's output, and the request id that joins the backend's logs, the traces and vLLM's own request."""

from __future__ import annotations

import re
import uuid
from typing import Any

from .request_decoding import EmbedRequest, GenerateRequest
from .sampling import TRACEPARENT

PROVIDER = "vllm"
# The context vLLM gets for a request Triton does not trace: valid but not sampled, so that vLLM (whose tracer
# otherwise starts a root span for every request) records nothing for it either.
UNSAMPLED = {"traceparent": "00-00000000000000000000000000000001-0000000000000001-00"}


def client_request_id(view: Any) -> str:
    """The id the client gave the Triton request ("" when none, or when the stub cannot say): called before a
    request can be answered, so it never raises."""
    get = getattr(view, "request_id", None)
    try:
        given = get() if get is not None else ""
    except Exception:
        return ""
    return given if isinstance(given, str) else ""


def request_id(view: Any) -> str:
    """vLLM's request id: the client's Triton request id first (when it sent one), then a unique part."""
    given = re.sub(r"[^A-Za-z0-9._:-]", "_", client_request_id(view))[:64]
    unique = uuid.uuid4().hex
    return f"{given}-{unique}" if given else unique


def trace_context(view: Any) -> str | None:
    """The request's W3C trace context as JSON: Triton's when Triton traces the request; else the client's
    `traceparent` that Triton forwarded as a request parameter (`--grpc-header-forward-pattern traceparent`,
    `--http-header-forward-pattern`): the parameters JSON carries it under the same key.

    Why the second: tritonserver's gRPC frontend (2.51 up to at least 2.73) reads the `traceparent` metadata as a C
    string, past its end (`GrpcServerCarrier::Get` returns `string_ref::data()`), so whatever bytes follow it decide
    whether the context parses: it lost one gRPC request in six on the GPU host, one in three of a CI run. The
    forwarded header is copied by its length, so the backend span and vLLM's still join the client's trace."""
    get = getattr(view, "trace_context", None)
    context = get() if get is not None else None
    if context:
        return context
    try:
        text = view.parameters()
    except Exception:  # tracing never fails a request: no context
        return None
    return text if isinstance(text, str) and f'"{TRACEPARENT}"' in text else None


def start_span(tracer: Any, view: Any, inflight: Any, attributes: dict[str, Any]) -> Any:
    """A span for the request if it carries a trace context (`trace_context`) the tracer samples, else None."""
    return tracer.start(trace_context(view), f"text_completion {attributes.get('triton.model_name', '')}".strip(), {
        **attributes, "gen_ai.provider.name": PROVIDER, "gen_ai.response.id": inflight.request_id,
        "triton.request_id": client_request_id(view) or None})


def describe(span: Any, request: GenerateRequest | EmbedRequest, model: str) -> None:
    """Name the span as the GenAI conventions do (`{operation} {model}`) and add the request's attributes."""
    attributes = span_attributes(request)
    span.rename(f"{attributes['gen_ai.operation.name']} {model}")
    span.set(attributes)


def engine_trace_headers(tracer: Any, span: Any) -> dict[str, str] | None:
    """vLLM's `trace_headers`: this request's span when it is traced, "not sampled" when tracing is on but Triton
    does not trace this request, nothing when tracing is off."""
    if span is not None:
        return span.headers()
    return UNSAMPLED if tracer is not None else None


def span_attributes(request: GenerateRequest | EmbedRequest) -> dict[str, Any]:
    if isinstance(request, EmbedRequest):
        return {"gen_ai.operation.name": "embeddings", "gen_ai.embeddings.dimension.count": request.dimensions}
    params = request.sampling.params
    return {
        "gen_ai.operation.name": "text_completion",
        "gen_ai.request.max_tokens": params.max_tokens,
        "gen_ai.request.temperature": params.temperature,
        "gen_ai.request.top_p": params.top_p,
        "gen_ai.request.top_k": params.top_k,
        "gen_ai.request.choice.count": params.n,
        "gen_ai.request.seed": params.seed,
        "vllm_triton.stream": request.stream,
        "vllm_triton.lora_name": request.sampling.lora_name,
    }


class Usage:
    """Token usage and finish reasons over a request's outputs (a stream's deltas, or one final output; a pooling
    model's output has no completions)."""

    def __init__(self) -> None:
        self.output_tokens = 0
        self.finish_reasons: dict[int, str] = {}

    def add(self, output: Any) -> None:
        for completion in output.outputs if isinstance(output.outputs, list) else ():
            self.output_tokens += len(completion.token_ids)
            if completion.finish_reason is not None:
                self.finish_reasons[completion.index] = str(completion.finish_reason)

    def attributes(self, final: Any) -> dict[str, Any]:
        return {
            "gen_ai.usage.input_tokens": len(final.prompt_token_ids or ()),
            "gen_ai.usage.output_tokens": self.output_tokens,
            "gen_ai.response.finish_reasons": [self.finish_reasons[i] for i in sorted(self.finish_reasons)] or None,
        }
