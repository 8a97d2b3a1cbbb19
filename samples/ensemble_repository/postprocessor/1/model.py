"""Ensemble step 3: the vLLM step's `text_output` → `final_output`, cleaned.

Cleaning removes what a reader should never see: U+FFFD (bytes of a character split across tokens), control
characters other than newline and tab, and Windows line ends. It works piece by piece, so the streaming variant
cleans each streamed piece the same way; for that reason it does not strip leading spaces (a streamed piece's
leading space separates it from the previous one).
"""

from __future__ import annotations

import unicodedata
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

KEEP = {"\n", "\t"}


def clean(text: str) -> str:
    text = text.replace("\r\n", "\n").replace("\ufffd", "")
    return "".join(c for c in text if c in KEEP or unicodedata.category(c) != "Cc")


class TritonPythonModel:
    def execute(self, requests: list[Any]) -> list[Any]:
        responses = []
        for request in requests:
            generated = pb_utils.get_input_tensor_by_name(request, "text_output").as_numpy().reshape(-1)
            final = [clean(t.decode("utf-8", errors="replace") if isinstance(t, bytes) else str(t)).encode()
                     for t in generated]
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("final_output", np.array(final, dtype=object))]))
        return responses
