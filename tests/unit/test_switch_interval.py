"""GIL_SWITCH_INTERVAL_MS "auto": short only while a response thread is behind, Python's otherwise."""

from vllm_triton_observable.backend.switch_interval import LanePace, SwitchInterval


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_the_interval_is_pythons_until_a_thread_falls_behind_and_again_once_it_caught_up():
    set_to = []
    interval = SwitchInterval(0.005, 0.0005, set_interval=set_to.append)
    clock = Clock()
    lane = LanePace(interval, behind_after_s=0.010, clock=clock)
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
    first, second = (LanePace(interval, behind_after_s=0.010, clock=clock) for _ in range(2))
    first.batch_taken(), second.batch_taken()
    clock.now += 0.020
    first.before_send(), second.before_send()
    first.caught_up()
    assert set_to == [0.005, 0.0005], "one thread is still behind"
    second.caught_up()
    assert set_to == [0.005, 0.0005, 0.005] and interval.hurries == 1
