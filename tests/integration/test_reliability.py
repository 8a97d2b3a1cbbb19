"""No request can harm another: a bad-input corpus and property-based requests beside well-formed traffic, and
cancellation storms — on the shared real server (tritonserver + vLLM, health monitor on)."""

from __future__ import annotations

import base64
import json
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from io import BytesIO

import numpy as np
import pytest
import requests
from helpers import generate, grpc_inputs, scrape, snapshot, value, wait_until
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllm_triton_observable.common.vocabulary import Outcome
from vllm_triton_observable.metrics import names

MODEL = "vllm_model"
LABELS = {"model": MODEL}
GREEDY = {"temperature": 0, "max_tokens": 8, "ignore_eos": True}
GOOD_PROMPTS = ["The quick brown fox", "def main():", "Once upon a time", "import numpy as np"]


def png(size: tuple[int, int]) -> str:
    from PIL import Image

    buffer = BytesIO()
    Image.new("1", size).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def sp(params: dict | str) -> dict:
    return {"sampling_parameters": params if isinstance(params, str) else json.dumps(params)}


# name → (request body besides text_input, the message the client must get)
CORPUS: dict[str, tuple[dict, str | tuple[str, ...]]] = {
    "deeply nested JSON": (sp("[" * 100_000), "sampling_parameters: JSON nested too deeply"),
    "deeply nested object": (sp('{"a":' * 50_000), "sampling_parameters: JSON nested too deeply"),
    "huge JSON": (sp({"junk": "x" * 4_000_000}), "unknown sampling parameter(s) 'junk'"),
    "empty prompt": ({"text_input": ""}, "text_input: is empty"),
    "oversize prompt": ({"text_input": "word " * 1200}, "maximum context length is 1024 tokens"),
    "unknown parameter": (sp({"max_tokenz": 3}), "unknown sampling parameter(s) 'max_tokenz'"),
    "ill-typed parameter": (sp({"temperature": "hot"}), "sampling parameter 'temperature': expected `float`"),
    "huge n": (sp({"n": 100_000}), "n must be at most"),
    "huge logprobs": (sp({"logprobs": 10**6}), "logprobs"),
    "negative max_tokens": (sp({"max_tokens": -1}), "max_tokens must be at least 1"),
    "NaN literal": (sp('{"temperature": NaN}'), "NaN is not a number JSON allows"),
    "NaN string": (sp({"temperature": "nan"}), "temperature must be a finite number"),
    "infinite top_p": (sp({"top_p": "inf"}), "top_p must be in (0, 1]"),
    # vLLM 0.26's default structured-output backend (guidance) reports json's own error; later ones their sentence
    "invalid JSON schema": (sp({"structured_outputs": {"json": "{not json"}}),
                            ("Invalid JSON grammar", "Expecting property name enclosed in double quotes")),
    "invalid regex": (sp({"structured_outputs": {"regex": "(unclosed"}}), "regex"),
    "malformed base64": ({"image": ["not base64!"]}, "image: not valid base64"),
    "truncated image": ({"image": [base64.b64encode(b"\x89PNG\r\n\x1a\n\x00\x00").decode()]},
                        "image: cannot be decoded"),
    "decompression bomb": ({"image": [png((12_000, 12_000))]}, "image: larger than"),
    "unknown LoRA": (sp({"lora_name": "nope"}), "LoRA is not enabled for this model"),
}


# -- the three ways in ---------------------------------------------------------------------------------
def via_generate(server, body: dict) -> str:
    response = requests.post(f"{server.http_url}/v2/models/{MODEL}/generate", json=body, timeout=30)
    assert response.status_code >= 400, response.text[:300]
    return response.json()["error"]


def via_generate_stream(server, body: dict) -> str:
    with requests.post(f"{server.http_url}/v2/models/{MODEL}/generate_stream", json={**body, "stream": True},
                       stream=True, timeout=30) as response:
        text = response.text
    events = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
    errors = [e["error"] for e in events if "error" in e]
    if not events:  # refused before streaming started
        errors = [json.loads(text)["error"]]
    assert len(errors) == 1, text[:300]
    return errors[0]


def grpc_error(server, inputs: list) -> str:
    import tritonclient.grpc as grpcclient

    done = threading.Event()
    results: list = []

    def callback(result, error):
        results.append((result, error))
        done.set()

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    try:
        client.start_stream(callback=callback)
        client.async_stream_infer(MODEL, inputs)
        assert done.wait(30), "no response"
        client.stop_stream()
    finally:
        client.close()
    (_, error), = results
    assert error is not None, results
    return str(error)


def via_grpc(server, body: dict) -> str:
    import tritonclient.grpc as grpcclient

    inputs = grpc_inputs(body.get("text_input", "Hello"))
    if "sampling_parameters" in body:
        tensor = grpcclient.InferInput("sampling_parameters", [1], "BYTES")
        tensor.set_data_from_numpy(np.array([body["sampling_parameters"].encode()], dtype=object))
        inputs.append(tensor)
    if "image" in body:
        tensor = grpcclient.InferInput("image", [len(body["image"])], "BYTES")
        tensor.set_data_from_numpy(np.array([i.encode() for i in body["image"]], dtype=object))
        inputs.append(tensor)
    return grpc_error(server, inputs)


# -- well-formed traffic beside ---------------------------------------------------------------------------
def good_outputs(server) -> list[str]:
    outputs = []
    for prompt in GOOD_PROMPTS:
        status, body = generate(server, MODEL, {"text_input": prompt, "parameters": GREEDY})
        assert status == 200, body
        outputs.append(body["text_output"])
    return outputs


def label_sets(families: dict) -> set:
    return {(s.name, tuple(sorted(s.labels.items()))) for f in families.values() for s in f.samples
            if s.labels.get("model") == MODEL}


def settled(server) -> None:
    """Nothing in flight, the engine idle, never restarted, still healthy."""
    def idle() -> bool:
        now = scrape(server)
        return (value(now, names.REQUESTS_IN_FLIGHT, **LABELS) == 0
                and value(now, names.VLLM_RUNNING, **LABELS) == 0
                and value(now, names.VLLM_WAITING, **LABELS) == 0)

    wait_until(idle, timeout=5)
    families = snapshot(server)
    assert value(families, names.ENGINE_RESTARTS, **LABELS) == 0
    assert value(families, names.ENGINE_HEALTHY, **LABELS) == 1


def test_bad_input_corpus_beside_well_formed_traffic(server):
    baseline = good_outputs(server)
    before = snapshot(server)
    beside: list[list[str]] = []
    stop = threading.Event()

    def traffic() -> None:
        while not stop.is_set():
            beside.append(good_outputs(server))

    runner = threading.Thread(target=traffic, daemon=True)
    runner.start()
    slow, wrong = [], []
    try:
        for name, (body, message) in CORPUS.items():
            for way in (via_generate, via_generate_stream, via_grpc):
                started = time.monotonic()
                error = way(server, {"text_input": "Hello", **body})
                took = time.monotonic() - started
                messages = message if isinstance(message, tuple) else (message,)
                if not any(m in error for m in messages) or "Traceback" in error or ".py" in error:
                    wrong.append(f"{name} via {way.__name__}: {error[:200]}")
                if took > 2.0:
                    slow.append(f"{name} via {way.__name__}: {took:.2f} s")
    finally:
        stop.set()
        runner.join(120)
    assert not wrong, "\n".join(wrong)
    assert not slow, "\n".join(slow)
    assert beside and all(outputs == baseline for outputs in beside)
    settled(server)
    after = snapshot(server)
    assert label_sets(after) == label_sets(before)  # no label value came from a request
    assert outcomes(before, after)["rejected"] == 3 * len(CORPUS)


def test_wrong_dtype_and_shape_get_tritons_specific_errors(server):
    import tritonclient.grpc as grpcclient

    wrong_type = grpcclient.InferInput("text_input", [1], "INT32")
    wrong_type.set_data_from_numpy(np.array([5], dtype=np.int32))
    assert "data-type is 'int32', but model 'vllm_model' expects 'bytes'" in grpc_error(server, [wrong_type]).lower()
    two = grpcclient.InferInput("text_input", [2], "BYTES")
    two.set_data_from_numpy(np.array([b"a", b"b"], dtype=object))
    assert "shape" in grpc_error(server, [two]).lower()
    assert "not valid UTF-8" in grpc_error(server, grpc_inputs(b"\xff\xfe bad"))
    settled(server)


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-5, 20), st.floats(allow_nan=True),
                    st.text(max_size=20))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.text(max_size=8), inner, max_size=4), max_leaves=10)


def sampling_keys() -> list[str]:
    from vllm_triton_observable.backend.sampling import allowed_keys

    return [*allowed_keys(), "bogus", "priority"]


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
@given(params=st.dictionaries(st.sampled_from(sampling_keys()), VALUES, max_size=4),
       prompt=st.text(min_size=0, max_size=40))
def test_any_parameters_get_an_answer_and_harm_nothing(server, params, prompt):
    params = {**params, "max_tokens": 4}  # bounded work per example
    response = requests.post(f"{server.http_url}/v2/models/{MODEL}/generate", timeout=30,
                             json={"text_input": prompt, "sampling_parameters": json.dumps(params)})
    assert response.status_code in (200, 400), response.text[:300]
    if response.status_code == 400:
        error = response.json()["error"]
        assert error and "Traceback" not in error and ".py\"" not in error, error


def test_property_cases_left_the_server_settled(server):
    settled(server)


# -- cancellation storms ---------------------------------------------------------------------------------
LONG = {"max_tokens": 1000, "ignore_eos": True}


def cancel_http_stream(server, rng: random.Random) -> None:
    with requests.post(f"{server.http_url}/v2/models/{MODEL}/generate_stream", stream=True, timeout=60,
                       json={"text_input": "storm", "parameters": {**LONG, "stream": True}}) as response:
        for i, _ in enumerate(response.iter_lines()):
            if i >= rng.randint(0, 6):
                break  # closing the connection cancels the request


def cancel_grpc(server, delay: float, stream: bool) -> None:
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    try:
        client.start_stream(callback=lambda result, error: None)
        client.async_stream_infer(MODEL, grpc_inputs("storm", stream=stream, sampling=LONG))
        time.sleep(delay)
        client.stop_stream(cancel_requests=True)
    finally:
        client.close()


def some_delay(rng: random.Random) -> float:
    """Some are cancelled before the request was even sent, some before the engine saw it, most while running."""
    return rng.choice([0.0, rng.uniform(0, 0.05), rng.uniform(0, 0.8)])


def received(families: dict) -> float:
    """Requests Triton handed to the model (it counts a decoupled model's error responses as successes)."""
    return sum(value(families, name, **LABELS) for name in (
        names.TRITON_SUCCESS, f"{names.TRITON_SUCCESS}_total", names.TRITON_FAILURE, f"{names.TRITON_FAILURE}_total"))


def outcomes(before: dict, after: dict) -> dict[str, float]:
    return {o: value(after, names.REQUESTS_FINISHED, outcome=o, **LABELS)
            - value(before, names.REQUESTS_FINISHED, outcome=o, **LABELS)
            for o in (outcome.value for outcome in Outcome)}


PUBLISH_INTERVAL_S = 1.0  # the metrics publisher's longest rest (metrics.publisher)


def test_cancellation_storm_ends_every_request(server):
    rng = random.Random(7)
    kinds = [lambda r: cancel_http_stream(server, r), lambda r: cancel_grpc(server, some_delay(r), stream=True),
             lambda r: cancel_grpc(server, some_delay(r), stream=False)]
    settled(server)
    before = snapshot(server)
    with ThreadPoolExecutor(12) as pool:
        list(pool.map(lambda i: kinds[i % 3](random.Random(rng.random())), range(200)))
    ended = time.monotonic()

    def all_ended() -> bool:
        now = scrape(server)
        return (value(now, names.REQUESTS_IN_FLIGHT, **LABELS) == 0
                and value(now, names.VLLM_RUNNING, **LABELS) == 0
                and value(now, names.VLLM_WAITING, **LABELS) == 0)

    wait_until(all_ended, timeout=10, interval=0.1)
    took = time.monotonic() - ended
    after = snapshot(server)
    ended_as = outcomes(before, after)
    # every request that reached the model ended, as cancelled (a few gRPC ones were cancelled before being sent)
    assert ended_as["cancelled"] == received(after) - received(before) >= 150, (ended_as, received(after))
    assert ended_as["completed"] == ended_as["failed"] == ended_as["rejected"] == 0, ended_as
    # The requests end when cancelled; what /metrics shows follows within a publish: after a storm the publisher's
    # CPU budget is spent and it rests up to its 1 s interval, and one publish took 0.1-0.3 s of wall time on busy
    # cores (2.13 s was seen once on two loaded cores against a bound of 2 s)
    assert took <= PUBLISH_INTERVAL_S + 2.0, \
        f"in flight / running / waiting returned to 0 only {took:.2f} s after the storm"
    settled(server)


@pytest.mark.parametrize("delay", [0.02, 0.3])
def test_a_cancelled_request_never_runs_to_the_end(server, delay):
    settled(server)
    before = snapshot(server)
    cancel_grpc(server, delay, stream=False)
    wait_until(lambda: received(scrape(server)) == received(before) + 1, timeout=5)
    settled(server)
    after = snapshot(server)
    assert value(after, names.VLLM_GENERATION_TOKENS, **LABELS) - value(
        before, names.VLLM_GENERATION_TOKENS, **LABELS) < LONG["max_tokens"]
    assert outcomes(before, after) == {"completed": 0, "cancelled": 1, "rejected": 0, "refused": 0, "failed": 0}
