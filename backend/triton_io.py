"""The only module of `backend` that touches `triton_python_backend_utils` (besides model.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from ..common.errors import RequestError
from .request_decoding import OutputOptions
from .response_encoding import ResponseChunk, encode_chunk


class TritonRequestView:
    """A `pb_utils.InferenceRequest` seen as a `request_decoding.RequestView`.

    Its inputs are listed once: decoding asks for a dozen by name, and `pb_utils.get_input_tensor_by_name` builds
    the request's whole input list for each ask, on the thread Triton waits on before it hands over the next
    request. Its parameters JSON is read once too: the tracer looks in it for a forwarded `traceparent`, and
    decoding for sampling parameters."""

    def __init__(self, request: Any) -> None:
        self._request = request
        self._inputs: dict[str, Any] | None = None
        self._parameters: str | None = None

    def input(self, name: str) -> np.ndarray | None:
        if self._inputs is None:
            self._inputs = {tensor.name(): tensor for tensor in self._request.inputs()}
        tensor = self._inputs.get(name)
        return None if tensor is None else tensor.as_numpy()

    def parameters(self) -> str:
        if self._parameters is None:
            self._parameters = self._request.parameters()
        return self._parameters

    def request_id(self) -> str:
        return self._request.request_id()

    def trace_context(self) -> str | None:
        """Triton's W3C trace context for this request ('{"traceparent": ...}') when Triton traces it in
        OpenTelemetry mode, else None."""
        try:
            trace = self._request.trace()
            return trace.get_context() if trace is not None else None
        except Exception:  # older stubs, or a request Triton does not trace
            return None


class PbTritonIO:
    final_flag = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL

    def __init__(self, batched: bool = False) -> None:
        self._batched = batched  # batched admission: every output leads with its request's batch dimension of 1

    def response(self, chunk: ResponseChunk, options: OutputOptions) -> Any:
        tensors = [pb_utils.Tensor(name, array[np.newaxis] if self._batched else array)
                   for name, array in encode_chunk(chunk, options).items()]
        return pb_utils.InferenceResponse(output_tensors=tensors)

    def error_response(self, error: RequestError) -> Any:
        code = getattr(pb_utils.TritonError, error.code.value)
        return pb_utils.InferenceResponse(error=pb_utils.TritonError(error.message, code=code))


class TritonLogger:
    """`pb_utils.Logger` with the backend's prefix, so its lines are easy to grep in Triton's log."""

    def info(self, message: str) -> None:
        pb_utils.Logger.log_info(f"[vllm] {message}")

    def warn(self, message: str) -> None:
        pb_utils.Logger.log_warn(f"[vllm] {message}")

    def error(self, message: str) -> None:
        pb_utils.Logger.log_error(f"[vllm] {message}")
