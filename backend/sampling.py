"""Sampling parameters from a request (JSON) → vLLM `SamplingParams`, or a precise error.

Accepted like the official backend: the `sampling_parameters` input or the request's parameters, numbers and
booleans given as strings ("0.1", "true"), `structured_outputs` as an object or a JSON string, plus
`lora_name`. Unlike the official backend, an unknown key or a value of the wrong type is an error that names it
(the official backend silently drops to defaults).
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from typing import Any

from ..common.errors import InvalidRequest

# SamplingParams fields a client must not set: the backend owns how outputs are delivered.
_BACKEND_OWNED = frozenset({"output_kind", "skip_clone", "output_text_buffer_length"})
# Keys Triton itself defines for request parameters; they are not sampling parameters.
TRITON_RESERVED = frozenset(
    {"sequence_id", "sequence_start", "sequence_end", "priority", "timeout", "binary_data_output",
     "triton_enable_empty_final_response"}
)
# The W3C trace context a server forwards from the client's headers as request parameters
# (`--grpc-header-forward-pattern traceparent`): the tracer reads it (trace_attributes.py); not sampling parameters.
TRACEPARENT = "traceparent"
TRACE_CONTEXT_KEYS = frozenset({TRACEPARENT, "tracestate"})
LORA_KEY = "lora_name"


@dataclass(frozen=True)
class SamplingRequest:
    params: Any  # vllm.SamplingParams
    lora_name: str | None


def _no_constant(name: str) -> Any:
    raise ValueError(name)


def parse_parameters_json(text: str, source: str) -> dict[str, Any]:
    try:
        value = json.loads(text, parse_constant=_no_constant) if text.strip() else {}
    except json.JSONDecodeError as exc:
        raise InvalidRequest(f"{source}: not valid JSON ({exc.msg} at position {exc.pos})") from None
    except RecursionError:
        raise InvalidRequest(f"{source}: JSON nested too deeply; send a flat JSON object") from None
    except ValueError as exc:
        raise InvalidRequest(f"{source}: {exc} is not a number JSON allows; send a finite number") from None
    if not isinstance(value, dict):
        raise InvalidRequest(f"{source}: must be a JSON object, got {type(value).__name__}")
    return value


@functools.cache
def allowed_keys() -> tuple[str, ...]:
    """Once per process: it runs for every request, on the thread Triton waits on before it hands over the next."""
    from vllm.sampling_params import SamplingParams

    public = (f for f in SamplingParams.__struct_fields__ if not f.startswith("_"))
    return tuple(sorted({*(f for f in public if f not in _BACKEND_OWNED), LORA_KEY}))


def build_sampling(raw: dict[str, Any], source: str) -> SamplingRequest:
    """Validate keys and types, then let vLLM check ranges (max_tokens ≥ 1, n ≥ 1, …). The parameters are made
    for this request alone, so vLLM need not deep-copy them when it takes the request (`skip_clone`, as vLLM's own
    API server sets it: the copy took ≈ 45-65 µs of the engine loop per request, 6 % of the stub's Python under a
    burst of short requests on the GPU host)."""
    import msgspec
    from vllm.sampling_params import SamplingParams  # not `from vllm import`: vLLM's lazy loader costs ≈ 9 µs

    values = {k: v for k, v in raw.items() if k not in TRITON_RESERVED and k not in TRACE_CONTEXT_KEYS}
    lora_name = values.pop(LORA_KEY, None)
    if lora_name is not None and not isinstance(lora_name, str):
        raise InvalidRequest(f"{source}: {LORA_KEY!r} must be a string, got {type(lora_name).__name__}")
    allowed = allowed_keys()
    unknown = sorted(set(values) - set(allowed))
    if unknown:
        raise InvalidRequest(
            f"{source}: unknown sampling parameter(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(allowed)}"
        )
    if isinstance(values.get("structured_outputs"), str):
        values["structured_outputs"] = parse_parameters_json(
            values["structured_outputs"], f"{source}: 'structured_outputs'"
        )
    try:
        params = msgspec.convert(values, SamplingParams, strict=False)
    except msgspec.ValidationError as exc:
        raise InvalidRequest(f"{source}: {_reword(str(exc))}") from None
    except RecursionError:
        raise InvalidRequest(f"{source}: a sampling parameter is nested too deeply") from None
    except Exception as exc:  # vLLM's own range checks (VLLMValidationError: "max_tokens must be at least 1")
        raise InvalidRequest(f"{source}: {exc}") from None
    for key in values:
        if not _finite(getattr(params, key, None)):
            raise InvalidRequest(f"{source}: sampling parameter {key!r} must be a finite number")
    params.skip_clone = True
    return SamplingRequest(params=params, lora_name=lora_name)


def _finite(value: Any) -> bool:
    """NaN or infinity ("nan" as a string converts too) would reach the sampler; vLLM does not check it."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    return True


def _reword(message: str) -> str:
    """msgspec says "Expected `int`, got `str` - at `$.max_tokens`"; say which parameter first."""
    text, _, where = message.partition(" - at `$.")
    if where:
        return f"sampling parameter {where.rstrip('`')!r}: {text[0].lower()}{text[1:]}"
    return message
