"""The official backend's interface, end to end: HTTP generate/generate_stream, gRPC streaming, outputs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import psutil
import pytest
from helpers import TINY_MODEL, generate, generate_stream, grpc_inputs, grpc_stream, run

from vllm_triton_observable.metrics import names

PROMPT = "What is Triton?"
GREEDY = {"temperature": 0, "max_tokens": 8, "ignore_eos": True}
# The same non-streaming cases against a decoupled model and one that is not (model_transaction_policy
# { decoupled: false }: one response per request, through the same response sender).
BOTH_MODES = ["vllm_model", "vllm_infer"]


@pytest.mark.parametrize("model", BOTH_MODES)
def test_generate_returns_the_prompt_and_new_text(server, model):
    status, body = generate(server, model, {"text_input": PROMPT,
                                                   "parameters": {"stream": False, "max_tokens": 16}})
    assert status == 200, body
    assert body["text_output"].startswith(PROMPT)
    assert len(body["text_output"]) > len(PROMPT)


@pytest.mark.parametrize("model", BOTH_MODES)
def test_exclude_input_in_output(server, model):
    _, full = generate(server, model, {"text_input": PROMPT, "parameters": GREEDY})
    _, only_new = generate(server, model, {"text_input": PROMPT, "exclude_input_in_output": True,
                                                  "parameters": GREEDY})
    assert full["text_output"] == PROMPT + only_new["text_output"]
    assert only_new["text_output"]


def test_generate_stream_sends_deltas_that_add_up(server):
    _, whole = generate(server, "vllm_model", {"text_input": PROMPT, "exclude_input_in_output": True,
                                               "parameters": GREEDY})
    events = generate_stream(server, "vllm_model", {"text_input": PROMPT, "return_num_output_tokens": True,
                                                    "parameters": {**GREEDY, "stream": True}})
    assert all("error" not in e for e in events), events
    assert len(events) >= 2
    assert "".join(e["text_output"] for e in events) == whole["text_output"]
    assert sum(e["num_output_tokens"] for e in events) == GREEDY["max_tokens"]


def needs_per_request_stream_interval() -> None:
    from vllm_triton_observable.backend.sampling import allowed_keys

    if "stream_interval" not in allowed_keys():  # the backend offers what the installed SamplingParams has
        pytest.skip("stream_interval is a sampling parameter from vLLM 0.27 (common/vllm_compat.py)")


def test_stream_interval_is_a_per_request_opt_in(server):
    """vLLM's `stream_interval` as a sampling parameter trades response granularity for CPU (docs/benchmarks.md):
    the first token at once, then one response per 4 tokens, the same text."""
    needs_per_request_stream_interval()
    _, whole = generate(server, "vllm_model", {"text_input": PROMPT, "exclude_input_in_output": True,
                                               "parameters": GREEDY})
    events = generate_stream(server, "vllm_model", {"text_input": PROMPT, "return_num_output_tokens": True,
                                                    "parameters": {**GREEDY, "stream": True, "stream_interval": 4}})
    assert all("error" not in e for e in events), events
    assert [e["num_output_tokens"] for e in events] == [1, 4, 3]
    assert "".join(e["text_output"] for e in events) == whole["text_output"]


@pytest.mark.parametrize("model", BOTH_MODES)
def test_every_return_output_non_streaming(server, model):
    from transformers import AutoTokenizer

    n_prompt = len(AutoTokenizer.from_pretrained(TINY_MODEL)(PROMPT)["input_ids"])
    status, body = generate(server, model, {
        "text_input": PROMPT, "return_finish_reason": True, "return_cumulative_logprob": True,
        "return_logprobs": True, "return_num_input_tokens": True, "return_num_output_tokens": True,
        "parameters": {**GREEDY, "logprobs": 1}})
    assert status == 200, body
    assert body["finish_reason"] == "length"
    assert body["num_input_tokens"] == n_prompt
    assert body["num_output_tokens"] == GREEDY["max_tokens"]
    assert body["cumulative_logprob"] < 0
    logprobs = json.loads(body["logprobs"])
    assert len(logprobs) == GREEDY["max_tokens"]
    assert all({"logprob", "rank", "decoded_token"} <= set(v) for step in logprobs for v in step.values())
    # Greedy: the sampled token is the rank-1 token, so the cumulative logprob is the sum of those.
    sampled = sum(next(v["logprob"] for v in step.values() if v["rank"] == 1) for step in logprobs)
    assert math.isclose(sampled, body["cumulative_logprob"], rel_tol=1e-4)


@pytest.mark.parametrize("model", BOTH_MODES)
def test_cumulative_logprob_without_logprobs_is_a_number_and_logprobs_stay_null(server, model):
    status, body = generate(server, model, {"text_input": PROMPT, "return_cumulative_logprob": True,
                                                   "return_logprobs": True, "parameters": GREEDY})
    assert status == 200, body
    assert body["cumulative_logprob"] < 0
    assert json.loads(body["logprobs"]) is None


@pytest.mark.parametrize("model", BOTH_MODES)
def test_n_completions_give_one_element_each(server, model):
    status, body = generate(server, model, {"text_input": PROMPT, "return_num_output_tokens": True,
                                                   "parameters": {"n": 3, "max_tokens": 4, "ignore_eos": True}})
    assert status == 200, body
    assert len(body["text_output"]) == 3
    assert body["num_output_tokens"] == [4, 4, 4]


@pytest.mark.parametrize("model", BOTH_MODES)
def test_sampling_parameters_input_with_string_values_as_official_clients_send(server, model):
    status, body = generate(server, model, {
        "text_input": PROMPT, "return_num_output_tokens": True,
        "sampling_parameters": json.dumps({"max_tokens": "5", "temperature": "0.1", "ignore_eos": "true"})})
    assert status == 200, body
    assert body["num_output_tokens"] == 5


def test_grpc_streaming_with_every_output(server):
    responses = run(grpc_stream(server, "vllm_model", grpc_inputs(
        PROMPT, sampling={**GREEDY, "logprobs": 1}, return_finish_reason=True, return_cumulative_logprob=True,
        return_logprobs=True, return_num_input_tokens=True, return_num_output_tokens=True)))
    assert all(error is None for _, error in responses), responses
    results = [r for r, _ in responses]
    assert len(results) >= 2
    finish = [r.as_numpy("finish_reason")[0].decode() for r in results]
    assert finish[-1] == "length" and set(finish[:-1]) <= {"None"}
    assert sum(int(r.as_numpy("num_output_tokens")[0]) for r in results) == GREEDY["max_tokens"]
    assert sum(len(json.loads(r.as_numpy("logprobs")[0])) for r in results) == GREEDY["max_tokens"]
    cumulative = [float(r.as_numpy("cumulative_logprob")[0]) for r in results]
    assert cumulative == sorted(cumulative, reverse=True) and cumulative[-1] < 0
    assert {int(r.as_numpy("num_input_tokens")[0]) for r in results} == {
        int(results[0].as_numpy("num_input_tokens")[0])}


def test_lora_adapter_changes_the_output(server):
    body = {"text_input": PROMPT, "exclude_input_in_output": True, "parameters": GREEDY}
    _, base = generate(server, "vllm_lora", body)
    status, adapted = generate(server, "vllm_lora", {**body, "parameters": {**GREEDY, "lora_name": "tiny-lora"}})
    assert status == 200, adapted
    assert adapted["text_output"] != base["text_output"]


LONG_PROMPT = "word " * 1200


@pytest.mark.parametrize("model, body, message", [
    ("vllm_model", {"sampling_parameters": "{max_tokens: 3"}, "sampling_parameters: not valid JSON"),
    ("vllm_model", {"parameters": {"max_tokenz": 3}}, "unknown sampling parameter(s) 'max_tokenz'"),
    ("vllm_model", {"parameters": {"temperature": "hot"}}, "sampling parameter 'temperature': expected `float`"),
    ("vllm_model", {"parameters": {"max_tokens": 0}}, "max_tokens must be at least 1, got 0"),
    ("vllm_model", {"parameters": {"n": 0}}, "n must be at least 1, got 0"),
    ("vllm_model", {"parameters": {"stream_interval": 0}}, "stream_interval must be at least 1, got 0"),
    ("vllm_model", {"parameters": {"stream_interval": 2.5}}, "sampling parameter 'stream_interval': expected `int"),
    ("vllm_model", {"text_input": LONG_PROMPT}, "maximum context length is 1024 tokens"),
    ("vllm_model", {"text_input": ""}, "text_input: is empty"),
    ("vllm_model", {"parameters": {"lora_name": "tiny-lora"}}, "LoRA is not enabled for this model"),
    ("vllm_lora", {"parameters": {"lora_name": "nope"}}, "unknown adapter 'nope'; available: tiny-lora"),
    ("vllm_model", {"stream": True, "exclude_input_in_output": False},
     "Error generating stream: When streaming, `exclude_input_in_output` = False is not allowed."),
    ("vllm_infer", {"sampling_parameters": "{max_tokens: 3"}, "sampling_parameters: not valid JSON"),
    ("vllm_infer", {"parameters": {"max_tokens": 0}}, "max_tokens must be at least 1, got 0"),
    ("vllm_infer", {"text_input": LONG_PROMPT}, "maximum context length is 1024 tokens"),
    ("vllm_infer", {"parameters": {"stream": True}}, "stream: true needs a decoupled model"),
])
def test_bad_input_gets_a_specific_400(server, model, body, message):
    if "stream_interval" in body.get("parameters", {}):
        needs_per_request_stream_interval()
    status, answer = generate(server, model, {"text_input": PROMPT, **body})
    assert status == 400, answer
    assert message in answer["error"]


def test_non_utf8_prompt_is_rejected_over_grpc(server):
    responses = run(grpc_stream(server, "vllm_model", grpc_inputs(b"\xff\xfe bad", sampling={"max_tokens": 2})))
    (_, error), = responses
    assert error is not None and "text_input: not valid UTF-8" in str(error)


def test_bad_input_harms_nothing_else(server):
    for _ in range(3):
        generate(server, "vllm_model", {"text_input": PROMPT, "parameters": {"max_tokens": -1}})
    status, body = generate(server, "vllm_model", {"text_input": PROMPT, "parameters": GREEDY})
    assert status == 200 and body["text_output"].startswith(PROMPT)


def test_client_cancellation_aborts_the_engine_request(server):
    from helpers import scrape, value, wait_until

    labels = {"model": "vllm_model"}
    before = scrape(server)
    responses = run(grpc_stream(server, "vllm_model", grpc_inputs(
        PROMPT, sampling={"max_tokens": 1000, "ignore_eos": True}), stop_after=3))
    assert len(responses) == 3 and all(error is None for _, error in responses)

    def engine_idle() -> bool:
        now = scrape(server)
        return (value(now, names.REQUESTS_FINISHED, outcome="cancelled", **labels)
                == value(before, names.REQUESTS_FINISHED, outcome="cancelled", **labels) + 1
                and value(now, names.REQUESTS_IN_FLIGHT, **labels) == 0
                and value(now, names.VLLM_RUNNING, **labels) == 0
                and value(now, names.VLLM_WAITING, **labels) == 0)

    wait_until(engine_idle, timeout=15)
    generated = (value(scrape(server), names.VLLM_GENERATION_TOKENS, **labels)
                 - value(before, names.VLLM_GENERATION_TOKENS, **labels))
    assert generated < 1000  # the engine stopped generating for the cancelled request
    # the official backend's log lines (its L0_backend_vllm request-cancellation suite greps for the first)
    log = server.log_text()
    assert log.count("[vllm] Cancelling the request") > 0, log[-2000:]
    assert log.count("[vllm] Successfully cancelled the request") > 0, log[-2000:]


def test_every_engine_core_is_spawned_as_a_python_process_not_a_fork_of_its_stub(server):
    """The backend spawns vLLM's EngineCore, as vllm serve does (backend.plan; docs/serving.md): each runs the
    environment's Python executable, not a copy of Triton's stub, and each load says how its engine starts. (vLLM's
    CPU platform spawns whatever the setting; on a GPU vLLM's default would fork. It also sets the variable in the
    process that builds a vLLM config, so a server started from a test process that did says "of the
    environment".)"""
    log = server.log_text()
    assert log.count("vLLM's EngineCore is started by spawn (VLLM_WORKER_MULTIPROC_METHOD") >= 3, log[-3000:]
    executables = []
    for process in psutil.Process(server.process.pid).children(recursive=True):
        try:
            if "EngineCore" in " ".join(process.cmdline()):
                executables.append(Path(process.exe()).name)
        except psutil.Error:  # a process that ended meanwhile
            continue
    assert len(executables) >= 3 and all(name.startswith("python") for name in executables), executables


def test_each_stub_runs_with_the_gil_switch_interval_its_config_sets_and_streams_the_same_tokens(server):
    """vllm_model keeps the default, `auto` (Python's 5 ms, 0.5 ms while a response thread is behind),
    vllm_nometrics sets GIL_SWITCH_INTERVAL_MS "0.5", vllm_infer "5": each ready line says what its stub's
    interpreter runs with (sys.getswitchinterval(), not the setting), and both streaming models stream the same
    greedy text for the same prompt and model."""
    log = server.log_text()
    assert ("model vllm_model (instance vllm_model_0_0) is ready (decoupled: streams; GIL switch interval 5 ms, "
            "0.5 ms while a response thread is behind") in log
    assert ("model vllm_nometrics (instance vllm_nometrics_0_0) is ready (decoupled: streams; GIL switch interval "
            "0.5 ms)") in log
    assert ("model vllm_infer (instance vllm_infer_0_0) is ready (not decoupled: one response per request, for "
            "infer(); GIL switch interval 5 ms)") in log
    streamed = {model: "".join(event["text_output"] for event in generate_stream(
        server, model, {"text_input": PROMPT, "parameters": GREEDY})) for model in ("vllm_model", "vllm_nometrics")}
    assert streamed["vllm_model"] == streamed["vllm_nometrics"] != ""
