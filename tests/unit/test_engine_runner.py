"""EngineRunner's ownership rules with a fake engine: a start that times out, and a shutdown during a start or
its warm-up, never leave an engine running without an owner; a new engine serves its warm-up request before it is
anyone's (the real engine is exercised in tests/integration)."""

import asyncio
import threading
import time
from types import SimpleNamespace

import pytest

from vllm_triton_observable.backend.engine_runner import EngineRunner, EngineStartError


class FakeEngine:
    def __init__(self, tasks=("generate",), max_logprobs=20, runner=None, step_s=0.0, fail=False):
        self.shut_down = threading.Event()
        self.tasks, self.requests, self.aborted = tasks, [], []
        self.model_config = SimpleNamespace(max_logprobs=max_logprobs)
        self.runner, self.step_s, self.fail = runner, step_s, fail
        self.own_request_seen: list[bool] = []

    def _run_output_handler(self):
        pass

    async def get_supported_tasks(self):
        return self.tasks

    async def generate(self, prompt, params, request_id, trace_headers=None):
        self.requests.append(("generate", type(params).__name__))
        self.own_request_seen.append(self.runner.activity.serving_own_request if self.runner else None)
        self.last_generate = (prompt, params, request_id)
        self.trace_headers = trace_headers
        await asyncio.sleep(self.step_s)
        if self.fail or self.shut_down.is_set():
            raise RuntimeError("EngineCore died")
        yield None

    async def abort(self, request_id):
        self.aborted.append(request_id)

    async def encode(self, prompt, params, request_id):
        self.requests.append(("encode", type(params).__name__))
        yield None

    def shutdown(self):
        self.shut_down.set()


class SlowRunner(EngineRunner):
    """Builds a FakeEngine after `build_s`, like AsyncLLM.from_engine_args blocking for the engine's start."""

    def __init__(self, build_s: float, start_timeout_s: float = 600.0, tasks=("generate",), own_trace_headers=None,
                 **engine):
        super().__init__(engine_args=None, start_timeout_s=start_timeout_s, log_info=self.logged.append,
                         own_trace_headers=own_trace_headers)
        self.build_s, self.built, self.tasks, self.engine_options = build_s, [], tasks, engine

    logged: list[str] = []

    def _create(self, future):
        time.sleep(self.build_s)
        engine = FakeEngine(self.tasks, runner=self, **self.engine_options)
        self.built.append(engine)
        future.set_result(engine)


def test_the_loop_keeps_running_while_an_engine_is_built():
    runner = SlowRunner(build_s=0.05)
    runner.start()
    runner.build_s = 1.0
    restart = threading.Thread(target=runner.restart)
    restart.start()
    time.sleep(0.2)

    async def ping():
        return "pong"

    assert runner.call(ping(), timeout=0.5) == "pong"  # answered while the new engine is still starting
    restart.join(5)
    assert runner.built[0].shut_down.is_set() and runner.engine is runner.built[1]
    runner.shutdown()
    assert runner.built[1].shut_down.is_set()


def test_a_start_that_times_out_shuts_the_late_engine_down():
    runner = SlowRunner(build_s=0.05, start_timeout_s=0.2)
    runner.start()
    runner.build_s = 0.6
    with pytest.raises(EngineStartError, match="did not start within 0.2 s"):
        runner.restart()
    time.sleep(0.8)
    assert len(runner.built) == 2 and runner.built[1].shut_down.is_set()
    runner.shutdown()


@pytest.mark.parametrize("build_s, step_s", [(0.8, 0.0), (0.05, 0.5)], ids=["building", "warming-up"])
def test_an_unload_during_a_restart_waits_for_the_new_engine_and_shuts_it_down(build_s, step_s):
    """Whether the new engine is still being built or already serves its warm-up request."""
    runner = SlowRunner(build_s=0.05)
    runner.start()
    runner.build_s, runner.engine_options = build_s, {"step_s": step_s}
    failures = []

    def restart():
        try:
            runner.restart()
        except EngineStartError as exc:
            failures.append(str(exc))

    thread = threading.Thread(target=restart)
    thread.start()
    time.sleep(0.3)
    runner.shutdown()  # an unload while the monitor restarts the engine
    thread.join(5)
    assert all(engine.shut_down.is_set() for engine in runner.built) and len(runner.built) == 2
    assert failures == ["the model was unloaded while the engine was starting"]
    assert runner.engine is None


@pytest.mark.parametrize("tasks, used", [(("generate",), ("generate", "SamplingParams")),
                                         (("token_embed", "embed"), ("encode", "PoolingParams"))])
def test_the_real_request_check_uses_what_the_model_can_do(tasks, used):
    runner = SlowRunner(0, tasks=tasks)
    runner.start()
    try:
        assert runner.supported_tasks == tasks
        runner.generate_one_token(timeout_s=5)
        assert runner.built[0].requests[-1] == used and runner.activity.serving_own_request is False
    finally:
        runner.shutdown()


def test_a_new_engine_serves_one_warm_up_request_with_logprobs_before_it_is_anyones():
    runner = SlowRunner(0, step_s=0.2, own_trace_headers={"traceparent": "unsampled"})
    seen_before_ready = []
    start = threading.Thread(target=runner.start)
    start.start()
    time.sleep(0.1)
    seen_before_ready.append(runner.engine)  # still warming up: nobody may use it yet
    start.join(5)
    try:
        engine = runner.built[0]
        prompt, params, request_id = engine.last_generate
        assert seen_before_ready == [None] and runner.engine is engine
        assert prompt == {"prompt_token_ids": [0]} and request_id.startswith("warm-up-")
        assert (params.max_tokens, params.logprobs) == (1, 1)
        # the metrics' pause is over
        assert engine.own_request_seen == [True] and runner.activity.serving_own_request is False
        assert engine.trace_headers == {"traceparent": "unsampled"}  # vLLM traces no request nobody sent
        assert any(line.startswith("engine warm-up: one request with logprobs served in") for line in runner.logged)
        runner.restart()  # a restarted engine warms up too
        assert runner.built[1].own_request_seen == [True] and runner.engine is runner.built[1]
    finally:
        runner.shutdown()


@pytest.mark.parametrize("options", [{"tasks": ("token_embed", "embed")}, {"max_logprobs": 0}])
def test_no_warm_up_where_the_logprobs_kernel_can_never_be_used(options):
    runner = SlowRunner(0, **options)
    runner.start()
    try:
        assert runner.built[0].requests == [] and runner.engine is runner.built[0]
    finally:
        runner.shutdown()


def test_a_failed_warm_up_fails_the_start_and_shuts_the_engine_down():
    runner = SlowRunner(0, fail=True)
    with pytest.raises(EngineStartError, match="started but failed its warm-up: RuntimeError: EngineCore died"):
        runner.start()
    assert runner.built[0].shut_down.is_set() and runner.engine is None
    assert runner.built[0].aborted == [runner.built[0].last_generate[2]]  # the engine was told to drop it
