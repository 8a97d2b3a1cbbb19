"""Request decoding and validation: every bad input gets an error naming the field and what is allowed."""

import base64
import json
import re

import numpy as np
import pytest

from vllm_triton_observable.backend.request_decoding import decode_request
from vllm_triton_observable.common.errors import InvalidRequest


class FakeView:
    def __init__(self, inputs=None, parameters="{}"):
        self._inputs = inputs or {}
        self._parameters = parameters

    def input(self, name):
        value = self._inputs.get(name)
        if value is None:
            return None
        return np.asarray(value, dtype=object if isinstance(value[0], (bytes, str)) else None)

    def parameters(self):
        return self._parameters


def view(prompt=b"Hello", parameters=None, **inputs):
    data = {"text_input": [prompt], **{k: [v] for k, v in inputs.items()}}
    return FakeView(data, json.dumps(parameters or {}))


def test_defaults_follow_the_official_backend():
    request = decode_request(view())
    assert request.prompt == "Hello"
    assert request.stream is False
    assert request.prepend_input is True  # non-streaming responses include the prompt by default
    assert request.sampling.params.max_tokens == 16
    assert request.outputs.finish_reason is False


def test_each_request_gets_parameters_of_its_own_which_vllm_need_not_deep_copy():
    """skip_clone, as vLLM's API server sets it for parameters made per request: vLLM then copies them shallowly
    instead of deep-copying them on its event loop. A client cannot set it (a backend-owned field)."""
    first, second = (decode_request(view(parameters={"stop": ["x"]})).sampling.params for _ in range(2))
    assert first is not second and first.stop is not second.stop
    assert first.skip_clone is True
    copied = first.clone()
    assert copied is not first and copied.max_tokens == first.max_tokens
    with pytest.raises(InvalidRequest, match="unknown sampling parameter.*'skip_clone'"):
        decode_request(view(parameters={"skip_clone": False}))


def test_a_forwarded_trace_context_is_not_a_sampling_parameter():
    """Triton forwards a client's `traceparent` / `tracestate` headers as request parameters where the operator asks
    (`--grpc-header-forward-pattern`): sampling parameters sent the same way still decode, the others still fail."""
    context = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "k=v"}
    assert decode_request(view(parameters={**context, "max_tokens": 3})).sampling.params.max_tokens == 3
    with pytest.raises(InvalidRequest, match=r"unknown sampling parameter\(s\) 'traceparentx'"):
        decode_request(view(parameters={**context, "traceparentx": 1}))


def test_streaming_never_prepends_the_prompt():
    assert decode_request(view(stream=True)).prepend_input is False
    assert decode_request(view(exclude_input_in_output=True)).prepend_input is False


def test_streaming_with_exclude_false_is_rejected():
    official = r"^Error generating stream: When streaming, `exclude_input_in_output` = False is not allowed\."
    with pytest.raises(InvalidRequest, match=official):
        decode_request(view(stream=True, exclude_input_in_output=False))


def test_sampling_parameters_input_wins_over_request_parameters_and_accepts_strings():
    request = decode_request(view(parameters={"max_tokens": 3},
                                  sampling_parameters=json.dumps({"max_tokens": "7", "temperature": "0.5",
                                                                  "ignore_eos": "true"}).encode()))
    params = request.sampling.params
    assert (params.max_tokens, params.temperature, params.ignore_eos) == (7, 0.5, True)


def test_false_string_is_false():  # the official backend's bool("false") would be True
    assert decode_request(view(parameters={"ignore_eos": "false"})).sampling.params.ignore_eos is False


def test_lora_name_and_triton_reserved_keys_are_not_sampling_keys():
    request = decode_request(view(parameters={"lora_name": "a", "priority": 0, "max_tokens": 2}))
    assert request.sampling.lora_name == "a"


def test_structured_outputs_as_json_string():
    request = decode_request(view(parameters={"structured_outputs": json.dumps({"regex": "a+"})}))
    assert request.sampling.params.structured_outputs.regex == "a+"


def test_cumulative_logprob_alone_turns_logprobs_on_internally():
    request = decode_request(view(return_cumulative_logprob=True))
    assert request.sampling.params.logprobs == 0
    assert request.client_logprobs is False
    assert decode_request(view(parameters={"logprobs": 2})).client_logprobs is True


def bomb() -> bytes:
    """A small PNG that claims more pixels than PIL's decompression-bomb limit."""
    from io import BytesIO

    from PIL import Image

    buffer = BytesIO()
    Image.new("1", (12_000, 12_000)).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: view(sampling_parameters=b"{max_tokens: 3"), "sampling_parameters: not valid JSON"),
        (lambda: view(sampling_parameters=b"[1, 2]"), "sampling_parameters: must be a JSON object, got list"),
        (lambda: view(parameters={"max_tokenz": 3}), "unknown sampling parameter(s) 'max_tokenz'; allowed: "),
        (lambda: view(parameters={"temperature": "hot"}), "sampling parameter 'temperature': expected `float`"),
        (lambda: view(parameters={"stop": 5}), "sampling parameter 'stop'"),
        (lambda: view(parameters={"max_tokens": 0}), "max_tokens must be at least 1, got 0"),
        (lambda: view(parameters={"max_tokens": -3}), "max_tokens must be at least 1"),
        (lambda: view(parameters={"n": 0}), "n must be at least 1, got 0"),
        (lambda: view(parameters={"lora_name": 5}), "'lora_name' must be a string"),
        (lambda: view(prompt=b""), "text_input: is empty"),
        (lambda: view(prompt=b"\xff\xfeabc"), "text_input: not valid UTF-8 (byte 0xff at offset 0)"),
        (lambda: view(image=b"not base64!"), "image: not valid base64"),
        (lambda: view(image=base64.b64encode(b"\x89PNG\r\n\x1a\n truncated")), "image: cannot be decoded"),
        (lambda: view(image=base64.b64encode(bomb())), "image: larger than"),
        (lambda: view(sampling_parameters=b"[" * 100_000), "sampling_parameters: JSON nested too deeply"),
        (lambda: view(sampling_parameters=b'{"temperature": NaN}'), "NaN is not a number JSON allows"),
        (lambda: view(parameters={"temperature": "nan"}), "temperature must be a finite number"),
        (lambda: view(parameters={"logit_bias": {"1": "inf"}}), "'logit_bias' must be a finite number"),
    ],
)
def test_bad_input_is_named(make, message):
    with pytest.raises(InvalidRequest) as info:
        decode_request(make())
    assert message in info.value.message


def test_missing_text_input():
    with pytest.raises(InvalidRequest, match="text_input: missing"):
        decode_request(FakeView({}, "{}"))


# -- embedding_request (pooling models) ------------------------------------------------------------------
def embed(payload, **inputs):
    raw = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return decode_request(view(embedding_request=raw, **inputs))


def test_embedding_request_as_the_official_backend_sends_it():
    request = embed({"input": "some text", "pooling_params": {"dimensions": [8]}, "model": "ignored"},
                    return_num_input_tokens=True)
    assert request.prompt == "some text"
    assert request.dimensions == 8  # the official form [n]; a bare n works too
    assert embed({"input": "x", "pooling_params": {"dimensions": 8}}).dimensions == 8
    assert request.outputs.num_input_tokens is True and request.outputs.num_output_tokens is False


def test_embedding_request_takes_token_ids():
    assert embed({"input": [1, 2, 3]}).prompt == {"prompt_token_ids": [1, 2, 3]}


@pytest.mark.parametrize("payload, message", [
    (b"{not json", "embedding_request: not valid JSON"),
    (b"[" * 100_000, "embedding_request: JSON nested too deeply"),
    ({"text": "x"}, 'embedding_request: missing "input"'),
    ({"input": ""}, "embedding_request.input: must be a non-empty string or a non-empty list of token ids"),
    ({"input": [1, "a"]}, "embedding_request.input: must be a non-empty string"),
    ({"input": [-1]}, "embedding_request.input: must be a non-empty string"),
    ({"input": [True]}, "embedding_request.input: must be a non-empty string"),
    ({"input": "x", "pooling_params": []}, "embedding_request.pooling_params: must be a JSON object"),
    ({"input": "x", "pooling_params": {"normalise": True}},
     "embedding_request.pooling_params: unknown key(s) normalise; allowed: dimensions, use_activation"),
    ({"input": "x", "pooling_params": {"dimensions": 0}}, "embedding_request.pooling_params.dimensions: must be"),
    ({"input": "x", "pooling_params": {"dimensions": [1, 2]}}, "pooling_params.dimensions: must be a positive"),
    ({"input": "x", "pooling_params": {"use_activation": "yes"}}, "pooling_params.use_activation: must be true"),
])
def test_bad_embedding_requests_are_named(payload, message):
    with pytest.raises(InvalidRequest, match=re.escape(message)):
        embed(payload)


def test_a_batch_of_prompts_is_refused_not_cut_to_its_first():
    """With batched admission (max_batch_size > 0) Triton lets a request carry several rows; one prompt per request
    is served, and a request of two gets a sentence instead of an answer to its first."""
    assert decode_request(FakeView({"text_input": np.array([[b"Hello"]], dtype=object)})).prompt == "Hello"
    with pytest.raises(InvalidRequest, match=re.escape("text_input: has 2 elements (shape [2, 1]); expected one")):
        decode_request(FakeView({"text_input": np.array([[b"a"], [b"b"]], dtype=object)}))
    with pytest.raises(InvalidRequest, match=re.escape("stream: has 2 elements")):
        decode_request(FakeView({"text_input": [b"a"], "stream": np.array([[True], [True]])}))
