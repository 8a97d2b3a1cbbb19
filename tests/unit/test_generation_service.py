"""GenerationService's guarantees with a fake engine: exactly one final response per request, whatever happens
(pure logic; the real engine and server are exercised end to end in tests/integration/test_reliability.py)."""

import asyncio
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest
from test_response_thread import FakeIO, FakeSender, wait_for

from vllm_triton_observable.backend.generation import GenerationService
from vllm_triton_observable.backend.lora import LoraRegistry


class Log:
    def __init__(self):
        self.errors, self.infos = [], []

    def error(self, message):
        self.errors.append(message)

    def info(self, message):
        self.infos.append(message)

    warn = error


class FakeEngine:
    def __init__(self, outputs=(), fail=None):
        self.outputs, self.fail, self.calls = list(outputs), fail, 0

    async def generate(self, prompt, params, request_id, lora_request=None, trace_headers=None):
        self.calls += 1
        for output in self.outputs:
            yield output
        if self.fail is not None:
            raise self.fail

    async def abort(self, request_id):
        pass


class Runner:
    """Runs each coroutine on a loop thread of its own, when told to (so a test can act before it runs)."""

    def __init__(self, engine, hold=False, tasks=("generate",)):
        self.engine, self.pending, self.hold, self.supported_tasks = engine, [], hold, tasks
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()

    def submit(self, coro):
        if self.hold:
            self.pending.append(coro)
            return None
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def release(self):
        self.hold = False
        for coro in self.pending:
            self.submit(coro)


class View:
    def __init__(self, parameters='{"max_tokens": 2}', prompt=b"hi", **inputs):
        self._inputs = {"text_input": np.array([prompt], dtype=object),
                        **{k: np.array([v], dtype=object) for k, v in inputs.items()}}
        self._parameters = parameters

    def input(self, name):
        return self._inputs.get(name)

    def parameters(self):
        return self._parameters


def output(text, finished):
    completion = SimpleNamespace(index=0, text=text, finish_reason="length" if finished else None,
                                 cumulative_logprob=None, logprobs=None, token_ids=[1])
    return SimpleNamespace(outputs=[completion], prompt_token_ids=[1, 2], finished=finished)


def serve(engine, view=None, hold=False, decoupled=True, tasks=("generate",)):
    log, sender = Log(), FakeSender()
    runner = Runner(engine, hold, tasks)
    service = GenerationService(runner, FakeIO(), LoraRegistry(), log, decoupled=decoupled)
    service.submit(SimpleNamespace(get_response_sender=lambda: sender), view or View())
    return service, runner, sender, log


def final(sender):
    wait_for(lambda: any(flags for _, flags in sender.sent))
    assert [flags for _, flags in sender.sent].count(1) == 1
    return sender.sent[-1][0]


def test_a_finished_generation_ends_with_its_output():
    service, _, sender, _ = serve(FakeEngine([output("a", True)]))
    assert final(sender) == ("ok", ["hia"])
    wait_for(lambda: not service.responses.inflight())


def test_a_stream_that_ends_without_a_final_output_still_gets_a_final_response():
    service, _, sender, log = serve(FakeEngine([output("a", False)]))
    kind, code, message = final(sender)
    assert code == "INTERNAL" and "ended without a final output" in message
    wait_for(lambda: not service.responses.inflight())


def test_an_unexpected_exception_is_internal_with_a_request_id_and_no_traceback():
    service, _, sender, log = serve(FakeEngine(fail=KeyError("boom")))
    _, code, message = final(sender)
    assert code == "INTERNAL" and "request id" in message and "Traceback" not in message
    assert any("Traceback" in line and "KeyError" in line for line in log.errors)


def test_a_stub_that_cannot_say_the_request_id_still_gets_the_request_served():
    class NoId(View):
        def request_id(self):
            raise RuntimeError("stub error")

    _, _, sender, _ = serve(FakeEngine([output("a", True)]), view=NoId())
    assert final(sender) == ("ok", ["hia"])


@pytest.mark.parametrize("exc", [RecursionError(), MemoryError(), UnicodeError("x")])
def test_any_exception_while_decoding_ends_the_request(monkeypatch, exc):
    import vllm_triton_observable.backend.generation as generation

    def explode(view):
        raise exc

    monkeypatch.setattr(generation, "decode_request", explode)
    service, _, sender, _ = serve(FakeEngine())
    _, code, message = final(sender)
    assert code == "INTERNAL" and type(exc).__name__ in message
    wait_for(lambda: not service.responses.inflight())


def test_a_cancel_noticed_before_the_engine_saw_the_request_stops_it():
    engine = FakeEngine([output("a", True)])
    service, runner, sender, _ = serve(engine, hold=True)
    (request,) = service.responses.inflight()
    request.cancelled = True
    runner.release()
    _, code, _ = final(sender)
    assert code == "CANCELLED" and engine.calls == 0


class Hanging(FakeEngine):
    async def generate(self, *args, **kwargs):
        await asyncio.sleep(3600)
        yield


def test_a_cancelled_generation_task_still_answers():
    service, runner, sender, _ = serve(Hanging())
    wait_for(lambda: asyncio.all_tasks(runner.loop))
    for task in asyncio.all_tasks(runner.loop):
        runner.loop.call_soon_threadsafe(task.cancel)
    _, code, message = final(sender)
    assert code == "UNAVAILABLE" and "being unloaded" in message


class Abortable(FakeEngine):
    """Generates until aborted, then ends the stream as vLLM does (a finished output)."""

    def __init__(self):
        super().__init__()
        self.aborted = asyncio.Event()

    async def generate(self, *args, **kwargs):
        await asyncio.wait_for(self.aborted.wait(), 10)
        yield output("", True)

    async def abort(self, request_id):
        self.aborted.set()


def test_a_client_cancellation_is_logged_with_the_official_lines_and_answered_with_its_sentence():
    service, _, sender, log = serve(Abortable())
    (request,) = service.responses.inflight()
    sender.cancelled = True
    _, code, message = final(sender)
    assert code == "CANCELLED" and message.startswith("Request was cancelled")
    rid = request.request_id
    assert log.infos == [f"Cancelling the request (request id {rid})",  # the logger adds "[vllm] "
                         f"Successfully cancelled the request (request id {rid})"]


def test_drain_lets_requests_finish_then_aborts_the_rest():
    service, _, sender, log = serve(Hanging())
    assert service.drain(0.2) == 1
    assert any("1 request(s) did not finish within 0.2 s and were aborted" in line for line in log.errors)
    _, code, message = final(sender)
    assert code == "UNAVAILABLE" and "did not finish within 0.2 s" in message
    refused = FakeSender()
    service.submit(SimpleNamespace(get_response_sender=lambda: refused), View())
    assert "being unloaded" in final(refused)[2]


class Slow(FakeEngine):
    """One output, 0.3 s after the request arrives."""

    async def generate(self, *args, **kwargs):
        await asyncio.sleep(0.3)
        yield output("a", True)


def test_drain_returns_when_the_last_request_is_answered_not_at_its_bound():
    service, _, sender, _ = serve(Slow())
    started = time.monotonic()
    assert service.drain(30) == 0
    assert time.monotonic() - started < 5  # woken by the last final response
    assert final(sender) == ("ok", ["hia"])


def test_a_model_that_is_not_decoupled_answers_once_and_refuses_streaming():
    _, _, sender, _ = serve(FakeEngine([output("ab", True)]), decoupled=False)
    assert final(sender) == ("ok", ["hiab"]) and len(sender.sent) == 1  # one response, with the final flag
    streaming = View()
    streaming._inputs["stream"] = np.array([True])
    _, _, sender, _ = serve(FakeEngine([output("a", True)]), streaming, decoupled=False)
    _, code, message = final(sender)
    assert code == "INVALID_ARG" and "needs a decoupled model" in message and "stream: false" in message


def test_a_request_the_model_cannot_serve_is_a_400_that_says_what_to_send():
    embedding = View(embedding_request=b'{"input": "x"}')
    engine = FakeEngine([output("a", True)])
    _, _, sender, _ = serve(engine, embedding)
    _, code, message = final(sender)
    assert code == "INVALID_ARG" and "does not compute embeddings (its vLLM tasks: generate)" in message
    _, _, sender, _ = serve(engine, View(), tasks=("embed",))
    _, code, message = final(sender)
    assert code == "INVALID_ARG" and "send embedding_request" in message
    assert engine.calls == 0


def _vllm_error(name):
    """An instance of one of the running vLLM's request errors, or a skip naming the release that brought it."""
    from vllm import exceptions

    cls = getattr(exceptions, name, None)
    if cls is None:
        pytest.skip(f"vllm.exceptions.{name} does not exist in this vLLM (common/vllm_compat.py names its release)")
    try:
        return cls()
    except TypeError:
        return cls("engine is paused")


@pytest.mark.parametrize("name", ["QueueOverflowError", "MaxQueuedTokensError", "RetryableRequestError"])
def test_a_full_or_paused_engine_is_unavailable_and_refused_not_failed(name):
    finished = []
    log, sender = Log(), FakeSender()
    service = GenerationService(Runner(FakeEngine(fail=_vllm_error(name))), FakeIO(), LoraRegistry(), log,
                                on_finished=lambda request, outcome: finished.append(outcome))
    service.submit(SimpleNamespace(get_response_sender=lambda: sender), View())
    _, code, message = final(sender)
    assert code == "UNAVAILABLE" and "a retry may succeed" in message and name in message
    wait_for(lambda: finished)
    assert [outcome.value for outcome in finished] == ["refused"] and not log.errors


def test_a_generation_error_is_internal_and_names_the_request():
    _, _, sender, log = serve(FakeEngine(fail=_vllm_error("GenerationError")))
    _, code, message = final(sender)
    assert code == "INTERNAL" and "the engine is healthy" in message and "request id" in message
    assert any("GenerationError" in line for line in log.errors)


def test_a_validation_error_is_the_clients_fault_even_after_the_first_output():
    from vllm.exceptions import VLLMValidationError

    _, _, sender, _ = serve(FakeEngine([output("a", False)], fail=VLLMValidationError("bad stop string")))
    _, code, message = final(sender)
    assert code == "INVALID_ARG" and "bad stop string" in message


def test_a_request_error_that_vllm_wrapped_is_judged_by_its_cause():
    """vLLM 0.27.1–0.31 wrap structured-output validation's ValueError in EngineGenerateError."""
    from vllm.v1.engine.exceptions import EngineGenerateError

    wrapped = EngineGenerateError()
    wrapped.__cause__ = ValueError("Invalid JSON grammar specification.")
    _, _, sender, _ = serve(FakeEngine(fail=wrapped))
    _, code, message = final(sender)
    assert code == "INVALID_ARG" and message == "Invalid JSON grammar specification."
    _, _, sender, log = serve(FakeEngine(fail=EngineGenerateError()))  # nothing wrapped: vLLM's own failure
    _, code, message = final(sender)
    assert code == "INTERNAL" and "EngineGenerateError" in message
