"""The model's inputs and outputs, as the official vLLM backend declares them.

`auto_complete_config` adds whichever of these the user's config.pbtxt lacks, so the official sample
repository and clients written for it work unchanged.
"""

from __future__ import annotations

from typing import Any

BOOL_FLAGS = (
    "exclude_input_in_output",
    "return_finish_reason",
    "return_cumulative_logprob",
    "return_logprobs",
    "return_num_input_tokens",
    "return_num_output_tokens",
)


def _optional(name: str, data_type: str, dims: list[int]) -> dict[str, Any]:
    return {"name": name, "data_type": data_type, "dims": dims, "optional": True}


INPUTS: list[dict[str, Any]] = [
    {"name": "text_input", "data_type": "TYPE_STRING", "dims": [1]},
    _optional("image", "TYPE_STRING", [-1]),
    _optional("stream", "TYPE_BOOL", [1]),
    _optional("sampling_parameters", "TYPE_STRING", [1]),
    *(_optional(flag, "TYPE_BOOL", [1]) for flag in BOOL_FLAGS),
    # JSON {"input": text or token ids, "pooling_params": {...}} for pooling models, as the official backend (and
    # Triton's OpenAI-compatible frontend for /v1/embeddings) sends it.
    _optional("embedding_request", "TYPE_STRING", [1]),
]

OUTPUTS: list[dict[str, Any]] = [
    {"name": "text_output", "data_type": "TYPE_STRING", "dims": [-1]},
    {"name": "finish_reason", "data_type": "TYPE_STRING", "dims": [-1]},
    {"name": "cumulative_logprob", "data_type": "TYPE_FP32", "dims": [-1]},
    {"name": "logprobs", "data_type": "TYPE_STRING", "dims": [-1]},
    {"name": "num_input_tokens", "data_type": "TYPE_UINT32", "dims": [1]},
    {"name": "num_output_tokens", "data_type": "TYPE_UINT32", "dims": [-1]},
]


def complete_config(config: Any) -> Any:
    """Fill in a `pb_utils.ModelConfig`: decoupled unless config.pbtxt chose, no Triton batching unless
    config.pbtxt asks for batched admission, every missing input/output."""
    current = config.as_dict()
    have_inputs = {i["name"] for i in current.get("input", [])}
    have_outputs = {o["name"] for o in current.get("output", [])}
    for spec in INPUTS:
        if spec["name"] not in have_inputs:
            config.add_input(spec)
    for spec in OUTPUTS:
        if spec["name"] not in have_outputs:
            config.add_output(spec)
    # Decoupled by default: one request streams many responses. An explicit `model_transaction_policy` block
    # (Triton reports it only when config.pbtxt has one) is the user's choice: `decoupled: false` serves plain
    # `infer()` and ensembles, one response per request.
    if "model_transaction_policy" not in current:
        config.set_model_transaction_policy({"decoupled": True})
    if current.get("max_batch_size", 0) > 0:
        # Batched admission, the operator's opt-in (docs/serving.md, "Batched admission"): Triton's dynamic
        # batcher hands the stub every request queued meanwhile in one execute() instead of one round trip each.
        # vLLM still does the batching that matters; clients of infer/stream_infer send a batch dimension of 1.
        config.set_dynamic_batching()
    else:
        # The official backend's contract: no batch dimension, one request per execute().
        config.set_max_batch_size(0)
    return config
