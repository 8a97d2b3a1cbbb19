"""Batched admission (config.pbtxt `max_batch_size` > 0, docs/serving.md): Triton hands the stub every request
queued meanwhile in one execute(), on a server of this module's with one model, `vllm_batched`, configured as
docs/serving.md's "Fast first tokens" recipe: max_batch_size 8 and two instances sharing one engine
(SHARED_ENGINE), metrics on (one engine, like the other small modules that run last); the shared server's
`vllm_model` keeps the official contract.

Its clients' contract: infer/stream_infer inputs and outputs carry a batch dimension of 1, a batch of several
prompts is refused with a sentence, the generate endpoints are unchanged; and bursts of requests do arrive in
batches (`vllm_triton_execute_batch_size`), where the default model gets them one by one. The recipe's part: both
instances take batches of a burst and serve them on the one engine.
"""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
import requests
from helpers import (
    generate,
    generate_stream,
    grpc_stream,
    run,
    scrape,
    server_env,
    snapshot,
    value,
    wait_until,
    write_model,
)
from triton_launcher import TritonServer

from vllm_triton_observable.metrics import names

MODEL = "vllm_batched"
INSTANCES = (f"{MODEL}_0_0", f"{MODEL}_0_1")
SAMPLING = {"max_tokens": 4, "temperature": 0}


@pytest.fixture(scope="module")
def batched_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("batched_repository")
    write_model(repo, MODEL, params={"REPORT_CUSTOM_METRICS": "true", "SHARED_ENGINE": "true"},
                instances=len(INSTANCES), extra_config="max_batch_size: 8\n")
    with TritonServer(repo, env=server_env()) as triton:
        triton.wait_ready(timeout=600)
        yield triton


def batched_inputs(prompts: list[str], stream: bool = True) -> list:
    """The official inputs with a leading batch dimension (one row per prompt)."""
    import tritonclient.grpc as grpcclient

    def tensor(name: str, rows: list, dtype: str) -> grpcclient.InferInput:
        array = np.array(rows, dtype=object if dtype == "BYTES" else bool).reshape(len(rows), 1)
        t = grpcclient.InferInput(name, list(array.shape), dtype)
        t.set_data_from_numpy(array)
        return t

    return [tensor("text_input", [p.encode() for p in prompts], "BYTES"),
            tensor("stream", [stream] * len(prompts), "BOOL"),
            tensor("sampling_parameters", [json.dumps(SAMPLING).encode()] * len(prompts), "BYTES")]


def test_the_config_has_the_dynamic_batcher_and_keeps_the_official_inputs(batched_server):
    config = requests.get(f"{batched_server.http_url}/v2/models/{MODEL}/config", timeout=10).json()
    assert config["max_batch_size"] == 8 and "dynamic_batching" in config
    assert {i["name"]: i["dims"] for i in config["input"]}["text_input"] == [1]


def test_stream_infer_with_a_batch_dimension_streams_the_same_tokens(batched_server):
    server = batched_server
    results = run(grpc_stream(server, MODEL, batched_inputs(["The capital of France is"])))
    assert [error for _, error in results if error is not None] == []
    outputs = [result.as_numpy("text_output") for result, _ in results]
    assert {o.shape for o in outputs} == {(1, 1)}  # every response leads with its request's batch dimension
    streamed = "".join(o[0][0].decode() for o in outputs)
    _, answer = generate(server, MODEL, {"text_input": "The capital of France is", "exclude_input_in_output": True,
                                          "sampling_parameters": json.dumps(SAMPLING)})
    assert streamed == answer["text_output"] and streamed  # greedy: the tokens the generate endpoint gives


def test_the_generate_endpoints_need_no_change(batched_server):
    server = batched_server
    status, answer = generate(server, MODEL, {"text_input": "Hello", "exclude_input_in_output": True,
                                              "sampling_parameters": json.dumps(SAMPLING)})
    assert status == 200 and isinstance(answer["text_output"], str) and answer["text_output"]
    events = generate_stream(server, MODEL, {"text_input": "Hello", "stream": True, "return_num_output_tokens": True,
                                             "sampling_parameters": json.dumps(SAMPLING)})
    assert all(isinstance(e["text_output"], str) and e["num_output_tokens"] == 1 for e in events), events
    assert "".join(e["text_output"] for e in events) == answer["text_output"]


def test_a_batch_of_prompts_is_refused_with_a_sentence_and_harms_nothing(batched_server):
    server = batched_server
    results = run(grpc_stream(server, MODEL, batched_inputs(["one", "two"])))
    errors = [str(error) for _, error in results if error is not None]
    assert len(errors) == 1 and "text_input: has 2 elements (shape [2, 1]); expected one" in errors[0], errors
    status, answer = generate(server, MODEL, {"text_input": "Hello", "sampling_parameters": json.dumps(SAMPLING)})
    assert status == 200 and answer["text_output"]


def stats_of(families: dict, model: str, **instance: str) -> tuple[float, float, float, float]:
    """(execute() calls, requests they handed over, calls with exactly one, calls with at most 8) of a model (or of
    one `model_instance=`) in one scrape."""
    sample = names.EXECUTE_BATCH_SIZE
    return (value(families, f"{sample}_count", model=model, **instance),
            value(families, f"{sample}_sum", model=model, **instance),
            value(families, f"{sample}_bucket", model=model, le="1", **instance),
            value(families, f"{sample}_bucket", model=model, le="8", **instance))


def execute_stats(server, model: str, settled: bool = False) -> tuple[float, float, float, float]:
    """A model's stats_of; `settled`: including everything before the call (an earlier test's requests, published
    within a second)."""
    return stats_of(snapshot(server) if settled else scrape(server), model)


def instance_stats(server, settled: bool = False) -> dict[str, tuple[float, float, float, float]]:
    """The recipe model's stats_of per instance, from one scrape."""
    families = snapshot(server) if settled else scrape(server)
    return {i: stats_of(families, MODEL, model_instance=i) for i in INSTANCES}


def burst(server, model: str, n: int) -> None:
    """`n` generate calls released at once."""
    gate = threading.Barrier(n)
    failures: list[str] = []

    def one() -> None:
        gate.wait(timeout=30)
        status, answer = generate(server, model, {"text_input": "Hi", "sampling_parameters": json.dumps(
            {"max_tokens": 2})}, timeout=120)
        if status != 200:
            failures.append(str(answer))

    threads = [threading.Thread(target=one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    assert not failures, failures[:3]


def test_a_burst_arrives_in_batches_with_batched_admission(batched_server):
    burst_counts(batched_server, MODEL, batched=True)


def test_the_recipe_runs_two_front_ends_of_one_engine(batched_server):
    log = batched_server.log_text()
    assert "SHARED_ENGINE: the model's 2 instances share one engine" in log
    assert "is client 0 of 2; it starts the engine" in log
    assert "is client 1 of 2; it uses the engine of instance slot 0 (pid " in log


def test_both_instances_take_batches_of_a_burst(batched_server):
    """The recipe divides a burst's admission between the stubs: each instance hands over several requests in one
    execute() at least once, and every request of the burst is served."""
    n = 24
    for _ in range(5):  # a burst that one instance happens to take whole is retried
        before = instance_stats(batched_server, settled=True)
        burst(batched_server, MODEL, n)
        expected = sum(b[1] for b in before.values()) + n
        wait_until(lambda expected=expected: execute_stats(batched_server, MODEL)[1] >= expected,
                   timeout=15)  # published within a second
        after = instance_stats(batched_server)
        grew = {i: [b - a for a, b in zip(before[i], after[i], strict=True)] for i in INSTANCES}
        assert sum(g[1] for g in grew.values()) == n, grew
        if all(calls < handed for calls, handed, _, _ in grew.values()):
            return
    pytest.fail(f"in five bursts of {n} simultaneous requests the two instances never both took several at once: "
                f"{grew}")


def test_a_burst_arrives_one_by_one_on_a_default_model(server):
    default = requests.get(f"{server.http_url}/v2/models/vllm_model/config", timeout=10).json()
    assert default["max_batch_size"] == 0 and "dynamic_batching" not in default
    burst_counts(server, "vllm_model", batched=False)


def burst_counts(server, model: str, batched: bool) -> None:
    """Bursts of simultaneous requests until one came in fewer execute() calls than requests (batched), or one in
    which every call handed over exactly one (not batched)."""
    n = 24
    for _ in range(5):  # a burst whose requests all happen to reach an idle execute() one by one is retried
        before = execute_stats(server, model, settled=True)
        burst(server, model, n)
        wait_until(lambda expected=before[1] + n: execute_stats(server, model)[1] >= expected,
                   timeout=15)  # published within a second
        calls, handed, ones, at_most_8 = (b - a for a, b in zip(before, execute_stats(server, model), strict=True))
        assert handed == n and at_most_8 == calls  # never more than max_batch_size at once
        if not batched:
            assert calls == ones == n  # the official contract: one request per execute()
            return
        if calls < n:  # some execute() handed over several
            return
    pytest.fail(f"five bursts of {n} simultaneous requests each reached the batched model one by one")
