"""make bench's round order: over an even number of rounds every configuration runs as often before a partner as
after it, so a position in the round biases no ratio; --engine-args as vllm serve's flags; and the in-process
engine's stop, which must end with the loop's other tasks cancelled, not with itself cancelled; --prompt-words'
prompts."""

import asyncio

import bench
from bench import ON_OFF, SERVING, round_order, serve_flag, stop_everything

CONFIGS = list(bench.CONFIGS)


def test_the_order_reverses_every_other_round():
    assert round_order(CONFIGS, 0) == CONFIGS
    assert round_order(CONFIGS, 1) == CONFIGS[::-1]
    assert round_order(CONFIGS, 2) == CONFIGS


def test_each_pair_is_measured_in_both_orders_equally_often():
    for top, bottom in [*ON_OFF.values(), *SERVING.values()]:
        first = [round_order(CONFIGS, r).index(top) < round_order(CONFIGS, r).index(bottom) for r in range(6)]
        assert first.count(True) == first.count(False) == 3, (top, bottom)


def test_engine_arguments_become_vllm_serve_flags():
    """--engine-args reach vllm serve as its own flags: booleans are switches, objects JSON."""
    assert serve_flag("stream_interval", 4) == ["--stream-interval", "4"]
    assert serve_flag("enable_prefix_caching", False) == ["--no-enable-prefix-caching"]
    assert serve_flag("enable_chunked_prefill", True) == ["--enable-chunked-prefill"]
    assert serve_flag("compilation_config", {"mode": 0}) == ["--compilation-config", '{"mode": 0}']


def test_the_direct_engine_stop_cancels_the_engine_tasks_and_returns():
    """The engine's own tasks (its output handler) are cancelled and awaited; the stop itself completes (under
    Python 3.11 a `wait_for` around it made it cancel its own wrapper and end the bench with CancelledError,
    before the servers were stopped)."""
    class Engine:
        stopped = False

        def shutdown(self) -> None:
            self.stopped = True

    engine, loop = Engine(), asyncio.new_event_loop()
    handler = loop.create_task(asyncio.sleep(3600))  # an output handler that would wait forever
    stop_everything(engine, loop, {}, None)
    assert engine.stopped and handler.cancelled() and loop.is_closed()


def test_long_prompts_share_no_prefix_across_requests_or_rounds(monkeypatch):
    """--prompt-words: each prompt gets that many words behind a nonce (vLLM's prefix cache must not prefill a
    later round from memory); without it, the prompt every earlier run measured."""
    assert bench.prompt(3) == bench.PROMPT.format(i=3)
    monkeypatch.setitem(bench.WORKLOAD, "prompt_words", 40)
    first, again = bench.prompt(3), bench.prompt(3)
    assert len(first.split()) == len(bench.PROMPT.format(i=3).split()) + 1 + 40
    assert first.split()[0] != again.split()[0] and first.split()[1:] == again.split()[1:]
