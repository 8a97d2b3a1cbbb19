"""EngineRunner's ownership rules with a fake engine: a start that times out, and a shutdown during a start,
never leave an engine running without an owner (the real engine is exercised in tests/integration)."""

import threading
import time

import pytest

from vllm_triton_observable.backend.engine_runner import EngineRunner, EngineStartError


class FakeEngine:
    def __init__(self, tasks=("generate",)):
        self.shut_down = threading.Event()
        self.tasks, self.requests = tasks, []

    def _run_output_handler(self):
        pass

    async def get_supported_tasks(self):
        return self.tasks

    async def generate(self, prompt, params, request_id):
        self.requests.append(("generate", type(params).__name__))
        yield None

    async def encode(self, prompt, params, request_id):
        self.requests.append(("encode", type(params).__name__))
        yield None

    def shutdown(self):
        self.shut_down.set()


class SlowRunner(EngineRunner):
    """Builds a FakeEngine after `build_s`, like AsyncLLM.from_engine_args blocking for the engine's start."""

    def __init__(self, build_s: float, start_timeout_s: float = 600.0, tasks=("generate",)):
        super().__init__(engine_args=None, start_timeout_s=start_timeout_s)
        self.build_s, self.built, self.tasks = build_s, [], tasks

    def _create(self, future):
        time.sleep(self.build_s)
        engine = FakeEngine(self.tasks)
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


def test_shutdown_during_a_start_waits_for_the_engine_and_shuts_it_down():
    runner = SlowRunner(build_s=0.05)
    runner.start()
    runner.build_s = 0.8
    failures = []

    def restart():
        try:
            runner.restart()
        except EngineStartError as exc:
            failures.append(str(exc))

    thread = threading.Thread(target=restart)
    thread.start()
    time.sleep(0.2)
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
        assert runner.built[0].requests == [used]
    finally:
        runner.shutdown()
