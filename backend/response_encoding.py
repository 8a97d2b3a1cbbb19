"""vLLM `RequestOutput`s → plain response chunks → output arrays.

A chunk is plain data, so the response thread can merge several pending chunks of one stream into one
response when the client is slower than the engine, and so encoding is unit-tested without Triton.
Every array has one element per completion (`n`), indexed by the completion's index: in a streamed
response a completion with nothing new has "" and 0 tokens.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .request_decoding import OutputOptions

UNFINISHED = "None"  # what the official backend sends (str(None)) while a completion is unfinished


@dataclass
class ResponseChunk:
    texts: list[str]
    finish_reasons: list[str]
    cumulative_logprobs: list[float]
    logprobs: list[list[dict[str, Any]] | None]
    num_output_tokens: list[int]
    num_input_tokens: int
    finished: bool = False

    def merge(self, later: ResponseChunk) -> None:
        """Append a later chunk of the same stream to this one."""
        for i in range(len(self.texts)):
            self.texts[i] += later.texts[i]
            if later.finish_reasons[i] != UNFINISHED:
                self.finish_reasons[i] = later.finish_reasons[i]
            if not math.isnan(later.cumulative_logprobs[i]):
                self.cumulative_logprobs[i] = later.cumulative_logprobs[i]
            if later.logprobs[i] is not None:
                self.logprobs[i] = (self.logprobs[i] or []) + later.logprobs[i]
            self.num_output_tokens[i] += later.num_output_tokens[i]
        self.finished = later.finished


def _logprobs(sample_logprobs: Any) -> list[dict[str, Any]] | None:
    if sample_logprobs is None:
        return None
    return [
        {str(token_id): {"logprob": lp.logprob, "rank": lp.rank, "decoded_token": lp.decoded_token}
         for token_id, lp in position.items()}
        for position in sample_logprobs
    ]


def chunk_from_output(output: Any, n: int, prefix: str = "", logprobs: bool = True) -> ResponseChunk:
    """One RequestOutput (cumulative or delta) → a chunk; `prefix` is prepended to every text."""
    chunk = ResponseChunk(
        texts=[prefix] * n,
        finish_reasons=[UNFINISHED] * n,
        cumulative_logprobs=[math.nan] * n,
        logprobs=[None] * n,
        num_output_tokens=[0] * n,
        num_input_tokens=len(output.prompt_token_ids or ()),
        finished=output.finished,
    )
    for completion in output.outputs:
        i = completion.index
        chunk.texts[i] = prefix + completion.text
        chunk.finish_reasons[i] = str(completion.finish_reason)
        if completion.cumulative_logprob is not None:
            chunk.cumulative_logprobs[i] = completion.cumulative_logprob
        chunk.logprobs[i] = _logprobs(completion.logprobs) if logprobs else None
        chunk.num_output_tokens[i] = len(completion.token_ids)
    return chunk


def chunk_from_embedding(output: Any) -> ResponseChunk:
    """A pooling model's final output → one chunk: the embedding as a JSON list of floats in `text_output` (as the
    official backend sends it), the prompt's token count, and no output tokens."""
    from vllm.outputs import EmbeddingOutput

    embedding = EmbeddingOutput.from_base(output.outputs).embedding
    return ResponseChunk(texts=[json.dumps(embedding, allow_nan=False)], finish_reasons=["stop"],
                         cumulative_logprobs=[math.nan], logprobs=[None], num_output_tokens=[0],
                         num_input_tokens=len(output.prompt_token_ids or ()), finished=True)


def encode_chunk(chunk: ResponseChunk, options: OutputOptions) -> dict[str, np.ndarray]:
    """The output tensors (name → array) the client asked for; `text_output` always."""
    arrays: dict[str, np.ndarray] = {
        "text_output": np.array([t.encode("utf-8") for t in chunk.texts], dtype=np.object_)
    }
    if options.finish_reason:
        arrays["finish_reason"] = np.array([r.encode() for r in chunk.finish_reasons], dtype=np.object_)
    if options.cumulative_logprob:
        arrays["cumulative_logprob"] = np.array(chunk.cumulative_logprobs, dtype=np.float32)
    if options.logprobs:
        arrays["logprobs"] = np.array([json.dumps(lp).encode() for lp in chunk.logprobs], dtype=np.object_)
    if options.num_input_tokens:
        arrays["num_input_tokens"] = np.array([chunk.num_input_tokens], dtype=np.uint32)
    if options.num_output_tokens:
        arrays["num_output_tokens"] = np.array(chunk.num_output_tokens, dtype=np.uint32)
    return arrays
