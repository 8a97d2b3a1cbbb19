"""A Triton request → a validated `GenerateRequest` or `EmbedRequest`, or an `InvalidRequest` naming the field at
fault.

Pure logic over a small `RequestView` (input tensors as numpy arrays + the parameters JSON), so it is
unit-tested without Triton. Defaults follow the official backend: non-streaming responses include the prompt
unless `exclude_input_in_output` is true; streaming never does.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..common.errors import InvalidRequest
from .sampling import SamplingRequest, build_sampling, parse_parameters_json


class RequestView(Protocol):
    def input(self, name: str) -> np.ndarray | None: ...

    def parameters(self) -> str: ...


@dataclass(frozen=True)
class OutputOptions:
    """Which optional outputs the client asked for (the `return_*` inputs)."""

    finish_reason: bool = False
    cumulative_logprob: bool = False
    logprobs: bool = False
    num_input_tokens: bool = False
    num_output_tokens: bool = False


@dataclass(frozen=True)
class GenerateRequest:
    prompt: str | dict[str, Any]
    stream: bool
    prepend_input: bool
    sampling: SamplingRequest
    outputs: OutputOptions
    # Whether the client asked for per-token logprobs (sampling `logprobs`); vLLM computes the cumulative
    # logprob only when logprobs are on, so `return_cumulative_logprob` alone turns them on internally.
    client_logprobs: bool = True


@dataclass(frozen=True)
class EmbedRequest:
    """An `embedding_request` (the official backend's input for pooling models): the text or token ids to embed."""

    prompt: str | dict[str, Any]  # text, or {"prompt_token_ids": [...]}
    dimensions: int | None
    use_activation: bool | None
    outputs: OutputOptions


EMBEDDING_INPUT = "embedding_request"
POOLING_KEYS = ("dimensions", "use_activation")


def _first(array: np.ndarray, name: str) -> Any:
    """The one element of a single-valued input. More than one is refused, not cut: with batched admission
    (max_batch_size > 0) Triton lets a client send a batch of prompts, and this backend serves one per request."""
    flat = np.asarray(array).reshape(-1)
    if flat.size == 0:
        raise InvalidRequest(f"{name}: is empty; expected one element")
    if flat.size > 1:
        raise InvalidRequest(f"{name}: has {flat.size} elements (shape {list(np.shape(array))}); expected one: "
                             "send one prompt per request (with a batch dimension of 1 where the model has one)")
    return flat[0]


def _bool_input(view: RequestView, name: str) -> bool | None:
    array = view.input(name)
    return None if array is None else bool(_first(array, name))


def _decode_text(value: Any, name: str) -> str:
    if isinstance(value, str):
        return value
    if not isinstance(value, (bytes, np.bytes_)):
        raise InvalidRequest(f"{name}: expected a UTF-8 string, got {type(value).__name__}")
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidRequest(
            f"{name}: not valid UTF-8 (byte 0x{exc.object[exc.start]:02x} at offset {exc.start}); "
            "send the prompt as UTF-8 text"
        ) from None


def _decode_prompt(view: RequestView) -> str | dict[str, Any]:
    array = view.input("text_input")
    if array is None:
        raise InvalidRequest("text_input: missing; it is required and must be a non-empty UTF-8 string")
    prompt = _decode_text(_first(array, "text_input"), "text_input")
    if not prompt:
        raise InvalidRequest("text_input: is empty; send a non-empty prompt")
    images = view.input("image")
    if images is None or np.asarray(images).size == 0:
        return prompt
    return {"prompt": prompt, "multi_modal_data": {"image": [_decode_image(i) for i in np.asarray(images).reshape(-1)]}}


def _decode_image(value: Any) -> Any:
    """A base64 image file → RGB. PIL's decompression-bomb warning is an error here: a small upload must not
    make the server allocate gigabytes."""
    import warnings
    from io import BytesIO

    from PIL import Image

    try:
        raw = base64.b64decode(_decode_text(value, "image"), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise InvalidRequest(f"image: not valid base64 ({exc}); send each image file base64-encoded") from None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            return Image.open(BytesIO(raw)).convert("RGB")
    except (Image.DecompressionBombWarning, Image.DecompressionBombError):
        raise InvalidRequest(f"image: larger than {Image.MAX_IMAGE_PIXELS} pixels; send a smaller image") from None
    except Exception as exc:  # PIL raises many types for truncated or crafted files
        raise InvalidRequest(f"image: cannot be decoded as an image file ({type(exc).__name__}: {exc})") from None


def _sampling(view: RequestView) -> SamplingRequest:
    tensor = view.input("sampling_parameters")
    if tensor is not None:
        source = "sampling_parameters"
        text = _decode_text(_first(tensor, source), source)
    else:
        source = "request parameters"
        text = view.parameters() or "{}"
    return build_sampling(parse_parameters_json(text, source), source)


def _embedding_input(value: Any) -> str | dict[str, Any]:
    source = f"{EMBEDDING_INPUT}.input"
    if isinstance(value, str) and value:
        return value
    if isinstance(value, list) and value and all(type(t) is int and t >= 0 for t in value):
        return {"prompt_token_ids": value}
    raise InvalidRequest(f"{source}: must be a non-empty string or a non-empty list of token ids (integers ≥ 0), "
                         f"got {json.dumps(value)[:80]}")


def _pooling_options(raw: Any) -> tuple[int | None, bool | None]:
    source = f"{EMBEDDING_INPUT}.pooling_params"
    if not isinstance(raw, dict):
        raise InvalidRequest(f"{source}: must be a JSON object, got {type(raw).__name__}")
    unknown = sorted(set(raw) - set(POOLING_KEYS))
    if unknown:
        raise InvalidRequest(f"{source}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(POOLING_KEYS)}")
    dimensions = raw.get("dimensions")
    if isinstance(dimensions, list) and len(dimensions) == 1:  # the official backend's form: [n]
        dimensions = dimensions[0]
    if dimensions is not None and not (type(dimensions) is int and dimensions > 0):
        raise InvalidRequest(f"{source}.dimensions: must be a positive integer (or [n]), got {dimensions!r}")
    use_activation = raw.get("use_activation")
    if use_activation is not None and not isinstance(use_activation, bool):
        raise InvalidRequest(f"{source}.use_activation: must be true or false, got {use_activation!r}")
    return dimensions, use_activation


def decode_embedding(view: RequestView) -> EmbedRequest:
    """`embedding_request` JSON: `input` (text or token ids) and optional `pooling_params` (`dimensions`,
    `use_activation`); other top-level keys are ignored, as the official backend does."""
    array = view.input(EMBEDDING_INPUT)
    raw = parse_parameters_json(_decode_text(_first(array, EMBEDDING_INPUT), EMBEDDING_INPUT), EMBEDDING_INPUT)
    if "input" not in raw:
        raise InvalidRequest(f"{EMBEDDING_INPUT}: missing \"input\" (the text or token ids to embed)")
    dimensions, use_activation = _pooling_options(raw.get("pooling_params", {}))
    outputs = OutputOptions(num_input_tokens=bool(_bool_input(view, "return_num_input_tokens")),
                            num_output_tokens=bool(_bool_input(view, "return_num_output_tokens")))
    return EmbedRequest(_embedding_input(raw["input"]), dimensions, use_activation, outputs)


def decode_request(view: RequestView) -> GenerateRequest | EmbedRequest:
    """An embedding when `embedding_request` is present (then `text_input` is not read), else a generation."""
    if view.input(EMBEDDING_INPUT) is not None:
        return decode_embedding(view)
    prompt = _decode_prompt(view)
    stream = bool(_bool_input(view, "stream"))
    exclude = _bool_input(view, "exclude_input_in_output")
    if stream and exclude is False:
        raise InvalidRequest(  # the official backend's sentence first: its clients and tests match it
            "Error generating stream: When streaming, `exclude_input_in_output` = False is not allowed. Streamed "
            "responses carry only new text: omit exclude_input_in_output or set it to true"
        )
    prepend_input = not stream and not exclude
    outputs = OutputOptions(
        finish_reason=bool(_bool_input(view, "return_finish_reason")),
        cumulative_logprob=bool(_bool_input(view, "return_cumulative_logprob")),
        logprobs=bool(_bool_input(view, "return_logprobs")),
        num_input_tokens=bool(_bool_input(view, "return_num_input_tokens")),
        num_output_tokens=bool(_bool_input(view, "return_num_output_tokens")),
    )
    sampling = _sampling(view)
    client_logprobs = sampling.params.logprobs is not None
    if outputs.cumulative_logprob and not client_logprobs:
        sampling.params.logprobs = 0
    return GenerateRequest(prompt, stream, prepend_input, sampling, outputs, client_logprobs)
