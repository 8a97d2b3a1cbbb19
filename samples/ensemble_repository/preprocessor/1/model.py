"""Ensemble step 1: turns `raw_text` into the vLLM step's inputs.

The prompt is the tokenizer's chat template applied to one user message when the tokenizer has a chat template,
else PROMPT_TEMPLATE with `{raw_text}` replaced. The sampling parameters are SAMPLING_PARAMETERS from config.pbtxt;
`exclude_input_in_output` is true so that only the generated text reaches the postprocessor; `stream` is always
true and only an ensemble that maps it (vllm_ensemble_stream) streams.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils


def _parameters(model_config: dict[str, Any]) -> dict[str, str]:
    return {key: value["string_value"] for key, value in model_config.get("parameters", {}).items()}


def _chat_template(tokenizer_dir: Path) -> Any | None:
    """The tokenizer when it has a chat template (imported here: the stub loads transformers only for this)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    return tokenizer if tokenizer.chat_template else None


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        parameters = _parameters(json.loads(args["model_config"]))
        version_dir = Path(args["model_repository"]) / args["model_version"]
        tokenizer_dir = (version_dir / parameters["TOKENIZER"]).resolve()
        if not tokenizer_dir.is_dir():
            raise pb_utils.TritonModelException(f"TOKENIZER: no directory {tokenizer_dir}")
        self.chat = _chat_template(tokenizer_dir)
        self.template = parameters["PROMPT_TEMPLATE"]
        sampling = json.loads(parameters["SAMPLING_PARAMETERS"])
        if not isinstance(sampling, dict):
            raise pb_utils.TritonModelException("SAMPLING_PARAMETERS must be a JSON object")
        self.sampling = json.dumps(sampling).encode()

    def prompt(self, raw_text: str) -> str:
        if self.chat is None:
            return self.template.replace("{raw_text}", raw_text)
        return self.chat.apply_chat_template([{"role": "user", "content": raw_text}], tokenize=False,
                                             add_generation_prompt=True)

    def respond(self, request: Any) -> Any:
        values = pb_utils.get_input_tensor_by_name(request, "raw_text").as_numpy().reshape(-1)
        if values.size != 1:
            raise ValueError(f"raw_text must hold exactly one string, got {values.size}")
        raw = values[0]
        try:
            text = raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
        except UnicodeDecodeError as exc:
            raise ValueError(f"raw_text is not UTF-8 text: {exc}") from None
        if not text.strip():
            raise ValueError("raw_text is empty: send the text to answer")
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor("text_input", np.array([self.prompt(text).encode()], dtype=object)),
            pb_utils.Tensor("sampling_parameters", np.array([self.sampling], dtype=object)),
            pb_utils.Tensor("exclude_input_in_output", np.array([True])),
            pb_utils.Tensor("stream", np.array([True])),
        ])

    def execute(self, requests: list[Any]) -> list[Any]:
        responses = []
        for request in requests:
            try:
                responses.append(self.respond(request))
            except ValueError as exc:  # a bad request fails alone, with the reason
                responses.append(pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(str(exc), pb_utils.TritonError.INVALID_ARG)))
        return responses
