"""The official backend's CI suites (triton-inference-server/vllm_backend `ci/L0_check_health_vllm`,
`ci/L0_backend_vllm/*`), rewritten as this project's tests of the same behaviour: what their clients see is what
clients of this backend see, with the facts of their model (facebook/opt-125m) replaced by the tiny model's.

The behaviours of `ci/L0_backend_vllm` live beside the features they test: the streaming refusal in
test_generate.py (`test_bad_input_gets_a_specific_400`), the cancellation log lines in test_generate.py
(`test_client_cancellation_aborts_the_engine_request`), metrics right after the last response and bucket lines in
`le` order in test_metrics.py. This file holds what needs a server of its own.
"""

from __future__ import annotations

import concurrent.futures

import requests
from conftest import FAST_HEALTH
from helpers import (
    backends_with_vllm_plugin,
    explicit_mode_server,
    generate,
    generate_stream,
    scrape,
    value,
    wait_until,
)

from vllm_triton_observable.health.monitor import UNHEALTHY_ANSWER
from vllm_triton_observable.metrics import names

# What L0_check_health_vllm does by patching vLLM in place (check_health raises from its second call on), done as
# a vLLM general plugin: check_health raises once the test creates a file, so the first requests are served.
SICK_CHECK_HEALTH = '''"""A vLLM general plugin: check_health raises once VLLM_TRITON_TEST_SICK's file exists."""
import os


def register():
    from vllm.v1.engine.async_llm import AsyncLLM

    if getattr(AsyncLLM.check_health, "made_sick", False):
        return
    healthy = AsyncLLM.check_health

    async def check_health(self):
        if os.path.exists(os.environ["VLLM_TRITON_TEST_SICK"]):
            raise RuntimeError("Simulated vLLM check_health() failure")
        await healthy(self)

    check_health.made_sick = True
    AsyncLLM.check_health = check_health
'''
MODELS = {
    # ENABLE_VLLM_HEALTH_CHECK true in explicit mode with unload: the official backend's behaviour
    "watched": {**FAST_HEALTH, "HEALTH_RECOVERY": "unload", "HEALTH_STALL_TIMEOUT_S": "10"},
    # ENABLE_VLLM_HEALTH_CHECK unspecified: check_health is never asked, whatever it would say
    "unwatched": {"REPORT_CUSTOM_METRICS": "true"},
}
TWO_TOKENS = {"text_input": "In this example,", "parameters": {"max_tokens": 2, "temperature": 0}}


def index_state(server, model: str) -> str:
    """The model's state in the repository index, which must list it once."""
    index = requests.post(f"{server.http_url}/v2/repository/index", json={}, timeout=5).json()
    states = [m.get("state") for m in index if m["name"] == model]
    assert len(states) == 1, f"duplicate model index entries: {index}"
    return states[0]


def ready(server, model: str) -> bool:
    """Both of the official test's readiness views: the ready endpoint and the repository index. The two are two
    requests, so the ready endpoint is asked between two reads of the index and compared only when the state did
    not move meanwhile (an unload moves READY -> UNLOADING -> UNAVAILABLE and never back)."""
    for _ in range(3):  # an unload has two moves, so the third try finds the state still
        before = index_state(server, model)
        endpoint = requests.get(f"{server.http_url}/v2/models/{model}/ready", timeout=5).status_code == 200
        after = index_state(server, model)
        if before == after:
            assert endpoint == (after == "READY"), (endpoint, before, after)
            return endpoint
    raise AssertionError(f"the state of {model} in the index kept moving: last {before} -> {after}")


def generating(server) -> bool:
    """The watched model's engine is running a request (the stream is under way)."""
    return value(scrape(server), names.VLLM_RUNNING, model="watched") >= 1


def serves_three_requests(server, model: str) -> None:
    for _ in range(3):
        assert ready(server, model)
        status, body = generate(server, model, TWO_TOKENS)
        assert status == 200 and body["text_output"], body
    assert ready(server, model)


def test_a_failing_vllm_check_health_is_answered_and_unloaded_as_by_the_official_backend(tmp_path):
    """L0_check_health_vllm: healthy models serve and stay ready; once vLLM's check_health() fails, a watched model
    answers `Model is unavailable due to unhealthy vLLM engine` (the cause follows) to its request, logs the official
    line, unloads, and the next request is for an unknown model; an unwatched model is not affected."""
    sick = tmp_path / "sick"
    backends = backends_with_vllm_plugin(tmp_path, "sick_check_health", SICK_CHECK_HEALTH)
    env = {"BACKEND_DIR": str(backends), "VLLM_TRITON_TEST_SICK": str(sick)}
    with explicit_mode_server(tmp_path / "repository", MODELS, list(MODELS), env=env) as server:
        for model in MODELS:
            serves_three_requests(server, model)
        # The official backend asks check_health() per request; this one asks it in the background every 0.5 s
        # here, so the request that meets the unhealthy engine is one in flight then (docs/health.md, "Where this
        # differs from the official backend").
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            stream = pool.submit(generate_stream, server, "watched", {"text_input": "In this example,", "parameters": {
                "max_tokens": 1000, "ignore_eos": True}}, timeout=120)
            wait_until(lambda: stream.running() and generating(server), timeout=30, interval=0.05)
            sick.touch()
            events = stream.result()
        error = events[-1].get("error", "")
        assert error.startswith(f"{UNHEALTHY_ANSWER} (model watched is unavailable: "), events[-1]
        assert "Simulated vLLM check_health() failure" in error
        wait_until(lambda: not ready(server, "watched"), timeout=60)
        status, body = generate(server, "watched", TWO_TOKENS)
        assert status == 404 and "Request for unknown model: 'watched' has no available versions" in body["error"], \
            (status, body)
        assert not ready(server, "watched")
        assert ("[vllm] Engine is not healthy and model will be unloaded: 2 consecutive engine probes failed, last: "
                "RuntimeError: Simulated vLLM check_health() failure") in server.log_text()
        serves_three_requests(server, "unwatched")
