"""A model that is not decoupled (`model_transaction_policy { decoupled: false }`): plain `infer()` over HTTP and
gRPC, one response per request through the response sender, with the same metrics, errors and cancellation as
the decoupled mode. The non-streaming cases of test_generate.py run against both modes too."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
import requests
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
import tritonclient.http as httpclient
from helpers import generate, grpc_inputs, scrape, snapshot, value, wait_until
from tritonclient.utils import InferenceServerException

from vllm_triton_observable.metrics import names

MODEL = "vllm_infer"
PROMPT = "What is Triton?"
GREEDY = '{"temperature": 0, "max_tokens": 8, "ignore_eos": true}'


def http_inputs(prompt: str, sampling: str = GREEDY, **flags: bool) -> list[httpclient.InferInput]:
    """As the official walkthrough's client builds them (BYTES from an object array: tritonclient refuses a numpy
    unicode array for BYTES)."""
    tensors = []
    for name, array, dtype in [("text_input", np.array([prompt.encode()], dtype=object), "BYTES"),
                               ("sampling_parameters", np.array([sampling.encode()], dtype=object), "BYTES"),
                               *((flag, np.array([on]), "BOOL") for flag, on in flags.items())]:
        tensor = httpclient.InferInput(name, list(array.shape), dtype)
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    return tensors


def test_the_transaction_policy_is_the_users_and_defaults_to_decoupled(server):
    def decoupled(model: str) -> bool:
        config = requests.get(f"{server.http_url}/v2/models/{model}/config", timeout=10).json()
        return config.get("model_transaction_policy", {}).get("decoupled", False)

    assert decoupled("vllm_model") and not decoupled(MODEL)
    assert f"model {MODEL} (instance {MODEL}_0_0) is ready (not decoupled" in server.log_text()


def test_http_infer_returns_what_generate_returns(server):
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    result = client.infer(MODEL, http_inputs(PROMPT, return_num_output_tokens=True),
                          outputs=[httpclient.InferRequestedOutput("text_output"),
                                   httpclient.InferRequestedOutput("num_output_tokens")])
    text = result.as_numpy("text_output")[0].decode()
    _, body = generate(server, MODEL, {"text_input": PROMPT, "parameters": {"temperature": 0, "max_tokens": 8,
                                                                            "ignore_eos": True}})
    assert text == body["text_output"] and text.startswith(PROMPT) and len(text) > len(PROMPT)
    assert result.as_numpy("num_output_tokens")[0] == 8


def test_grpc_unary_infer_works(server):
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    result = client.infer(MODEL, grpc_inputs(PROMPT, stream=False, sampling={"temperature": 0, "max_tokens": 4}))
    assert result.as_numpy("text_output")[0].decode().startswith(PROMPT)


def test_a_decoupled_model_still_refuses_infer_as_triton_does(server):
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    with pytest.raises(InferenceServerException, match="decoupled"):
        client.infer("vllm_model", http_inputs(PROMPT))


def test_errors_are_specific_400s_through_infer(server):
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    with pytest.raises(InferenceServerException, match="max_tokens must be at least 1, got 0"):
        client.infer(MODEL, http_inputs(PROMPT, '{"max_tokens": 0}'))
    with pytest.raises(InferenceServerException, match="stream: true needs a decoupled model"):
        client.infer(MODEL, http_inputs(PROMPT, stream=True))


def test_metrics_count_infer_requests_as_in_decoupled_mode(server):
    labels = {"model": MODEL}
    before = snapshot(server)
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    for _ in range(3):
        client.infer(MODEL, http_inputs(PROMPT))
    with pytest.raises(InferenceServerException):
        client.infer(MODEL, http_inputs(PROMPT, '{"max_tokens": 0}'))

    def delta(after, sample, **extra):
        return value(after, sample, **labels, **extra) - value(before, sample, **labels, **extra)

    expected = {(names.REQUESTS_FINISHED, "completed"): 3, (names.REQUESTS_FINISHED, "rejected"): 1,
                (names.VLLM_REQUEST_SUCCESS, None): 3, (names.VLLM_GENERATION_TOKENS, None): 3 * 8}
    seen: dict = {}

    def counted() -> bool:
        after = scrape(server)
        seen.update({key: delta(after, key[0], **({"outcome": key[1]} if key[1] else {})) for key in expected})
        return seen == expected

    try:
        wait_until(counted, timeout=10)
    except AssertionError:
        raise AssertionError(seen) from None
    assert value(scrape(server), names.REQUESTS_IN_FLIGHT, **labels) == 0


def test_a_cancelled_infer_stops_the_engine_request(server):
    """gRPC unary infer cancelled by the client: the engine request is aborted, the outcome is `cancelled`."""
    labels = {"model": MODEL}
    before = value(snapshot(server), names.REQUESTS_FINISHED, outcome="cancelled", **labels)
    long = {"max_tokens": 1000, "ignore_eos": True}

    async def cancel_after(seconds: float) -> None:
        client = aioclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        call = asyncio.ensure_future(client.infer(MODEL, grpc_inputs(PROMPT, stream=False, sampling=long)))
        await asyncio.sleep(seconds)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        await client.close()

    started = time.monotonic()
    asyncio.run(cancel_after(1.0))
    wait_until(lambda: value(scrape(server), names.REQUESTS_FINISHED, outcome="cancelled", **labels) == before + 1,
               timeout=10)
    assert time.monotonic() - started < 8  # 1000 tokens take far longer: the generation was stopped
    wait_until(lambda: value(scrape(server), names.VLLM_RUNNING, **labels) == 0, timeout=5)
