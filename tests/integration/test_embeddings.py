"""Embeddings as the official backend serves them: the pooling sample (samples/embedding_repository, the tiny model
with `"runner": "pooling"`) answers `embedding_request` with the embedding as JSON in `text_output`, refuses what
it cannot do with the reason, and moves the metrics a request moves."""

from __future__ import annotations

import contextlib
import json
import os
import signal

import numpy as np
import psutil
import pytest
import tritonclient.http as httpclient
from helpers import (
    ROOT,
    TINY_MODEL,
    engine_of,
    exposition_mismatches,
    generate,
    launched,
    leaked,
    printed_commands,
    run_command,
    scrape,
    snapshot,
    stub_of,
    value,
    wait_until,
)
from triton_launcher import shm_in_use

from vllm_triton_observable.metrics import names

REPO = ROOT / "samples" / "embedding_repository"
MODEL = "vllm_embed"
HIDDEN_SIZE = json.loads((TINY_MODEL / "config.json").read_text())["hidden_size"]


@pytest.fixture(scope="module")
def exposition(tmp_path_factory):
    return tmp_path_factory.mktemp("exposition")


@pytest.fixture(scope="module")
def served(exposition):
    with launched(REPO, env={"VLLM_TRITON_EXPOSITION_DIR": str(exposition)}) as served:
        yield served


@pytest.fixture(scope="module")
def embedder(served):
    return served.endpoint


def embed(server, payload: dict, **flags: bool) -> tuple[int, dict]:
    return generate(server, MODEL, {"text_input": "", "embedding_request": json.dumps(payload), **flags})


def vector(body: dict) -> list[float]:
    values = json.loads(body["text_output"])
    assert len(values) == HIDDEN_SIZE and all(isinstance(v, float) for v in values), body
    return values


def test_text_and_token_ids_are_embedded(embedder):
    status, body = embed(embedder, {"input": "What is Triton?"}, return_num_input_tokens=True,
                         return_num_output_tokens=True)
    assert status == 200, body
    first = vector(body)
    assert body["num_input_tokens"] > 0 and body["num_output_tokens"] == 0  # nothing is generated
    assert vector(embed(embedder, {"input": "What is Triton?"})[1]) == first  # deterministic
    assert vector(embed(embedder, {"input": "Something else entirely"})[1]) != first
    status, body = embed(embedder, {"input": [5, 6, 7]}, return_num_input_tokens=True)
    assert status == 200 and body["num_input_tokens"] == 3, body
    vector(body)


def test_plain_infer_as_a_tritonclient_user_calls_it(embedder):
    inputs = []
    for name, text in (("text_input", ""), ("embedding_request", json.dumps({"input": "What is Triton?"}))):
        tensor = httpclient.InferInput(name, [1], "BYTES")
        tensor.set_data_from_numpy(np.array([text.encode()], dtype=object))
        inputs.append(tensor)
    result = httpclient.InferenceServerClient(f"127.0.0.1:{embedder.http_port}").infer(MODEL, inputs)
    assert vector({"text_output": result.as_numpy("text_output")[0].decode()}) == vector(
        embed(embedder, {"input": "What is Triton?"})[1])


@pytest.mark.parametrize("body, message", [
    ({"text_input": "hello"}, "this model computes embeddings and does not generate text"),
    ({"text_input": "", "embedding_request": "{oops"}, "embedding_request: not valid JSON"),
    ({"text_input": "", "embedding_request": json.dumps({"input": []})}, "embedding_request.input: must be"),
    ({"text_input": "", "embedding_request": json.dumps({"input": "x", "pooling_params": {"dimensions": [8]}})},
     "does not support Matryoshka embeddings"),  # vLLM's own check, passed on as a 400
])
def test_what_the_model_cannot_do_is_a_400_with_the_reason(embedder, body, message):
    status, answer = generate(embedder, MODEL, body)
    assert status == 400 and message in answer["error"], answer


def test_an_embedding_moves_the_metrics_of_a_request(embedder):
    def counts(families):
        return {"completed": value(families, names.REQUESTS_FINISHED, model=MODEL, outcome="completed"),
                "rejected": value(families, names.REQUESTS_FINISHED, model=MODEL, outcome="rejected"),
                "prompt tokens": value(families, names.VLLM_PROMPT_TOKENS, model=MODEL)}

    before = counts(snapshot(embedder))
    status, body = embed(embedder, {"input": [5, 6, 7, 8]}, return_num_input_tokens=True)
    assert status == 200, body
    assert embed(embedder, {"input": ""})[0] == 400
    wait_until(lambda: counts(snapshot(embedder))["completed"] > before["completed"], timeout=15)
    after = counts(snapshot(embedder))
    assert {k: after[k] - before[k] for k in after} == {"completed": 1, "rejected": 1, "prompt tokens": 4}
    assert value(snapshot(embedder), names.REQUESTS_IN_FLIGHT, model=MODEL) == 0


def test_an_embeddings_histograms_equal_vllms_own_exposition(embedder, exposition):
    before = snapshot(embedder)
    for tokens in ([5, 6, 7], list(range(3, 40))):
        assert embed(embedder, {"input": tokens})[0] == 200
    instance = f"{MODEL}_0_0"
    requests_ = f"{names.VLLM_E2E_LATENCY}_count"  # first the requests on Triton: both sides equal, stale, before
    wait_until(lambda: value(scrape(embedder), requests_, model=MODEL) - value(before, requests_, model=MODEL) == 2,
               15)
    with contextlib.suppress(AssertionError):
        wait_until(lambda: not exposition_mismatches(embedder, exposition / f"{instance}.prom", instance), 15)
    assert not exposition_mismatches(embedder, exposition / f"{instance}.prom", instance)
    after = scrape(embedder)
    for histogram, expected in ((names.VLLM_E2E_LATENCY, 2), (names.VLLM_REQUEST_PROMPT_TOKENS, 2)):
        sample = f"{histogram}_count"
        assert value(after, sample, model=MODEL) - value(before, sample, model=MODEL) == expected
    sample = f"{names.VLLM_REQUEST_PROMPT_TOKENS}_sum"
    assert value(after, sample, model=MODEL) - value(before, sample, model=MODEL) == 3 + 37


def test_the_printed_example_embeds(served):
    (command,) = printed_commands(served.output)
    vector(json.loads(run_command(command)))


def test_a_killed_tritonserver_takes_its_engine_with_it(served):
    """Last in this module: it kills the module's server. The stub exits by itself once tritonserver is gone;
    vLLM's EngineCore and worker would stay behind for good, with their shared memory, without the backend's
    parent watch."""
    stub = stub_of(served.pid, MODEL)
    processes = [stub, *engine_of(stub)]
    memory = shm_in_use(processes)
    os.kill(served.pid, signal.SIGKILL)

    def alive(p: psutil.Process) -> bool:
        try:
            return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    wait_until(lambda: not any(alive(p) for p in processes), timeout=30)
    # unlinked by the engine's processes as they shut down, the rest by their resource tracker a moment later
    left = leaked(memory, timeout=30)
    assert not left, f"left behind: {sorted(left)} of {sorted(memory)}"
