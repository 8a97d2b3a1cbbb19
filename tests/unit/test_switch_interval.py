"""GIL_SWITCH_INTERVAL_MS "auto": short only while a response thread is behind, Python's otherwise; and the
thread-seconds behind that vllm_triton_response_threads_behind_seconds_total publishes."""

import pytest

from vllm_triton_observable.backend.lanes_behind import LanePace, LanesBehind
from vllm_triton_observable.backend.switch_interval import SwitchInterval


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_the_interval_is_pythons_until_a_thread_falls_behind_and_again_once_it_caught_up():
    set_to = []
    interval = SwitchInterval(0.005, 0.0005, set_interval=set_to.append)
    clock = Clock()
    lane = LanePace(LanesBehind(interval.lanes_behind, clock=clock), behind_after_s=0.010, clock=clock)
    assert set_to == [0.005]
    lane.batch_taken()
    clock.now += 0.009
    lane.before_send()  # 9 ms into its batch: not behind yet
    assert set_to == [0.005]
    clock.now += 0.002
    lane.before_send()  # 11 ms: behind
    lane.before_send()  # still behind: no second change
    assert set_to == [0.005, 0.0005] and interval.hurries == 1
    lane.caught_up()
    lane.caught_up()  # caught up twice changes nothing more
    assert set_to == [0.005, 0.0005, 0.005]
    lane.batch_taken()
    lane.before_send()  # a new batch starts on time
    assert set_to[-1] == 0.005 and interval.hurries == 1


def test_with_several_threads_the_interval_stays_short_until_the_last_one_caught_up():
    set_to = []
    interval = SwitchInterval(0.005, 0.0005, set_interval=set_to.append)
    clock = Clock()
    lanes = LanesBehind(interval.lanes_behind, clock=clock)
    first, second = (LanePace(lanes, behind_after_s=0.010, clock=clock) for _ in range(2))
    first.batch_taken(), second.batch_taken()
    clock.now += 0.020
    first.before_send(), second.before_send()
    first.caught_up()
    assert set_to == [0.005, 0.0005], "one thread is still behind"
    second.caught_up()
    assert set_to == [0.005, 0.0005, 0.005] and interval.hurries == 1


def test_the_seconds_behind_count_from_10_ms_into_the_batch_summed_over_threads_running_spells_included():
    clock = Clock()
    counts = []
    lanes = LanesBehind(counts.append, clock=clock)
    first, second = (LanePace(lanes, behind_after_s=0.010, clock=clock) for _ in range(2))
    assert lanes.seconds() == 0.0
    first.batch_taken()
    clock.now += 1.0  # its first send waited a second (tritonserver stalled, say)
    first.before_send()  # noticed now, behind since 10 ms into the batch
    assert lanes.seconds() == pytest.approx(0.990)
    clock.now += 1.0
    assert lanes.seconds() == pytest.approx(1.990)  # a spell still running counts
    second.batch_taken()
    clock.now += 0.011
    second.before_send()  # two threads behind
    clock.now += 0.5
    first.caught_up()
    clock.now += 0.25
    second.caught_up()
    clock.now += 10.0  # nobody behind: nothing more
    assert lanes.seconds() == pytest.approx((1.990 + 0.011 + 0.5) + (0.001 + 0.5 + 0.25))
    assert counts == [1, 2, 1, 0]


def test_a_batch_of_one_send_that_waited_counts_behind_once_more_is_waiting_and_not_when_nothing_is():
    """A response thread whose only send of a batch waited two seconds (tritonserver stopped) while the engine's next
    tokens queued up has been behind since 10 ms into that batch: no later send of the batch is left to notice it,
    so the end of the batch does. The same wait with nothing queued behind it is no thread behind the engine."""
    clock = Clock()
    lanes = LanesBehind(clock=clock)
    lane = LanePace(lanes, behind_after_s=0.010, clock=clock)
    lane.batch_taken()
    lane.before_send()  # on time
    clock.now += 2.0  # the send waits for tritonserver
    lane.batch_sent(more_waiting=True)
    assert lanes.seconds() == pytest.approx(1.990)
    lane.batch_taken()
    lane.before_send()
    clock.now += 0.004
    lane.batch_sent(more_waiting=False)  # the queue drained: caught up
    clock.now += 5.0
    assert lanes.seconds() == pytest.approx(1.994)
    lane.batch_taken()
    clock.now += 2.0
    lane.batch_sent(more_waiting=False)  # slow, but nothing was waiting behind it
    assert lanes.seconds() == pytest.approx(1.994)
