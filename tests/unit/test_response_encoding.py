"""Chunks from vLLM outputs, merging of pending stream chunks, and the output tensors."""

import json
import math
from types import SimpleNamespace

import numpy as np

from vllm_triton_observable.backend.request_decoding import OutputOptions
from vllm_triton_observable.backend.response_encoding import chunk_from_output, encode_chunk


def completion(index, text, tokens, finish=None, cumulative=None, logprobs=None):
    return SimpleNamespace(index=index, text=text, token_ids=tokens, finish_reason=finish,
                           cumulative_logprob=cumulative, logprobs=logprobs)


def output(*completions, finished=False, prompt_tokens=(1, 2, 3)):
    return SimpleNamespace(outputs=list(completions), finished=finished, prompt_token_ids=list(prompt_tokens))


def test_arrays_are_indexed_by_completion_index():
    chunk = chunk_from_output(output(completion(1, "b", [7])), n=2)
    assert chunk.texts == ["", "b"]
    assert chunk.num_output_tokens == [0, 1]
    assert chunk.finish_reasons == ["None", "None"]


def test_prefix_is_prepended_for_non_streaming():
    chunk = chunk_from_output(output(completion(0, " world", [1, 2], "length")), n=1, prefix="hello")
    assert chunk.texts == ["hello world"]


def test_merge_concatenates_a_stream():
    lp = SimpleNamespace(logprob=-1.0, rank=1, decoded_token="a")
    first = chunk_from_output(output(completion(0, "a", [1], cumulative=-1.0, logprobs=[{1: lp}])), n=1)
    second = chunk_from_output(output(completion(0, "b", [2], "length", -2.5, [{2: lp}]), finished=True), n=1)
    first.merge(second)
    assert first.texts == ["ab"]
    assert first.num_output_tokens == [2]
    assert first.finish_reasons == ["length"]
    assert first.cumulative_logprobs == [-2.5]
    assert [list(p) for p in first.logprobs[0]] == [["1"], ["2"]]
    assert first.finished is True


def test_encode_only_requested_outputs():
    chunk = chunk_from_output(output(completion(0, "x", [5, 6], "stop", -0.5), finished=True), n=1)
    arrays = encode_chunk(chunk, OutputOptions())
    assert list(arrays) == ["text_output"]
    everything = encode_chunk(chunk, OutputOptions(True, True, True, True, True))
    assert everything["finish_reason"].tolist() == [b"stop"]
    assert everything["cumulative_logprob"].dtype == np.float32
    assert everything["num_input_tokens"].tolist() == [3]
    assert everything["num_output_tokens"].tolist() == [2]
    assert json.loads(everything["logprobs"][0]) is None


def test_logprobs_hidden_when_client_did_not_ask():
    lp = SimpleNamespace(logprob=-1.0, rank=1, decoded_token="a")
    chunk = chunk_from_output(output(completion(0, "a", [1], cumulative=-1.0, logprobs=[{1: lp}])), n=1,
                              logprobs=False)
    assert chunk.logprobs == [None]
    assert not math.isnan(chunk.cumulative_logprobs[0])
