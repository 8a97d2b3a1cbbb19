"""make bench's round order: over an even number of rounds every configuration runs as often before a partner as
after it, so a position in the round biases no ratio; and --engine-args as vllm serve's flags."""

import bench
from bench import ON_OFF, SERVING, round_order, serve_flag

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
