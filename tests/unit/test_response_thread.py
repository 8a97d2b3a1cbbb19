"""The response threads: finals, coalescing of stream chunks, cancellation polling, outcomes, lanes, pace."""

import threading
import time

from vllm_triton_observable.backend.lanes_behind import LanesBehind
from vllm_triton_observable.backend.request_decoding import OutputOptions
from vllm_triton_observable.backend.response_encoding import ResponseChunk
from vllm_triton_observable.backend.response_thread import InflightRequest, ResponseLanes, ResponseThread
from vllm_triton_observable.backend.switch_interval import SwitchInterval
from vllm_triton_observable.common.errors import InvalidRequest
from vllm_triton_observable.common.vocabulary import Outcome


class FakeIO:
    final_flag = 1

    def response(self, chunk, options):
        return ("ok", list(chunk.texts))

    def error_response(self, error):
        return ("error", error.code.value, error.message)


class FakeSender:
    def __init__(self, cancelled=False):
        self.sent = []
        self.cancelled = cancelled
        self.gate = threading.Event()
        self.gate.set()

    def send(self, response, flags=0):
        self.gate.wait(5)
        self.sent.append((response, flags))

    def is_cancelled(self):
        return self.cancelled


def chunk(text, finished=False):
    return ResponseChunk([text], ["None"], [float("nan")], [None], [1], 3, finished)


def make_thread(**kwargs):
    finished, cancelled = [], []
    thread = ResponseThread(FakeIO(), cancelled.append, lambda r, o: finished.append(o), print, **kwargs)
    return thread, finished, cancelled


def wait_for(predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_final_flag_only_on_last_and_outcome_recorded():
    thread, finished, _ = make_thread()
    sender = FakeSender()
    request = InflightRequest("r1", sender, OutputOptions())
    thread.register(request)
    thread.send_chunk(request, chunk("a"))
    thread.send_chunk(request, chunk("b", finished=True))
    wait_for(lambda: finished)
    assert sender.sent[-1][1] == 1
    assert "".join(t for (_, texts), _f in sender.sent for t in texts) == "ab"
    assert finished == [Outcome.COMPLETED]
    assert thread.inflight() == []
    thread.stop()


def test_pending_chunks_of_a_slow_client_are_merged():
    thread, finished, _ = make_thread()
    sender = FakeSender()
    sender.gate.clear()  # the client is slow: the first send blocks
    request = InflightRequest("r1", sender, OutputOptions())
    thread.register(request)
    thread.send_chunk(request, chunk("a"))
    time.sleep(0.1)
    for piece in "bcd":
        thread.send_chunk(request, chunk(piece))
    thread.send_chunk(request, chunk("e", finished=True))
    sender.gate.set()
    wait_for(lambda: finished)
    texts = [texts[0] for (_, texts), _f in sender.sent]
    assert "".join(texts) == "abcde"
    assert len(texts) < 5
    thread.stop()


def test_error_is_final_and_later_output_is_dropped():
    thread, finished, _ = make_thread()
    sender = FakeSender()
    request = InflightRequest("r1", sender, OutputOptions())
    thread.register(request)
    thread.send_error(request, InvalidRequest("bad"))
    thread.send_chunk(request, chunk("late", finished=True))
    wait_for(lambda: finished)
    time.sleep(0.1)
    assert sender.sent == [(("error", "INVALID_ARG", "bad"), 1)]
    assert finished == [Outcome.REJECTED]
    thread.stop()


def test_client_cancellation_is_polled_and_the_final_says_cancelled():
    thread, finished, cancelled = make_thread(cancel_poll_s=0.05)
    sender = FakeSender(cancelled=True)
    request = InflightRequest("r1", sender, OutputOptions())
    thread.register(request)
    wait_for(lambda: cancelled)
    assert cancelled == [request]
    thread.send_chunk(request, chunk("", finished=True))  # the engine's final (aborted) output
    wait_for(lambda: finished)
    assert sender.sent[-1][0][:2] == ("error", "CANCELLED")
    assert finished == [Outcome.CANCELLED]
    thread.stop()


def test_a_response_that_cannot_be_encoded_still_ends_the_request_with_an_error():
    class BrokenIO(FakeIO):
        def response(self, chunk, options):
            raise ValueError("cannot encode")

    finished = []
    thread = ResponseThread(BrokenIO(), lambda r: None, lambda r, o: finished.append(o), print)
    sender = FakeSender()
    request = InflightRequest("r1", sender, OutputOptions())
    thread.register(request)
    thread.send_chunk(request, chunk("a", finished=True))
    wait_for(lambda: finished)
    (response, flags), = sender.sent
    assert flags == 1 and response[:2] == ("error", "INTERNAL") and "request id r1" in response[2]
    assert finished == [Outcome.FAILED] and thread.inflight() == []
    thread.stop()


def test_lanes_send_side_by_side_and_keep_each_streams_order():
    """A sender stuck in its round trip holds up only the requests of its own lane."""
    finished = []
    lanes = ResponseLanes(2, FakeIO(), lambda r: None, lambda r, o: finished.append(r.request_id), print)
    stuck, free = FakeSender(), FakeSender()
    stuck.gate.clear()
    requests = [InflightRequest(name, sender, OutputOptions()) for name, sender in (("a", stuck), ("b", free))]
    for request in requests:
        lanes.register(request)
    assert requests[0].lane is not requests[1].lane
    assert {r.lane._thread.name for r in requests} == {"vllm-responses-0", "vllm-responses-1"}
    for text in "xyz":
        for request in requests:
            lanes.send_chunk(request, chunk(text, finished=text == "z"))
    wait_for(lambda: finished == ["b"])  # b's lane is done while a's first send still waits
    assert {r.request_id for r in lanes.inflight()} == {"a"}
    stuck.gate.set()
    wait_for(lambda: len(finished) == 2)
    for sender in (stuck, free):
        assert "".join(t for (_, texts), _f in sender.sent for t in texts) == "xyz"
        assert [flags for _, flags in sender.sent][-1] == 1
    assert lanes.inflight() == []
    lanes.stop()
    assert not any(r.lane._thread.is_alive() for r in requests)


class SlowSender(FakeSender):
    def send(self, response, flags=0):
        time.sleep(0.006)  # each send waits 6 ms, as for the GIL behind a busy engine loop
        super().send(response, flags)


def test_a_response_thread_whose_sends_are_slow_shortens_the_interval_and_restores_it_when_its_queue_is_empty():
    """The real ResponseThread loop: a batch still being sent after 10 ms hurries, an empty queue relaxes."""
    set_to = []
    interval = SwitchInterval(0.005, 0.0005, set_interval=set_to.append)
    lanes = ResponseLanes(1, FakeIO(), lambda r: None, lambda r, o: None, print, LanesBehind(interval.lanes_behind))
    blocker, slow = FakeSender(), SlowSender()
    blocker.gate.clear()
    first = InflightRequest("first", blocker, OutputOptions())
    lanes.register(first)
    lanes.send_chunk(first, chunk("a", finished=True))
    time.sleep(0.05)  # the thread is in the blocked send: what follows is taken as one batch
    requests = [InflightRequest(f"r{i}", slow, OutputOptions()) for i in range(4)]
    for request in requests:
        lanes.register(request)
        lanes.send_chunk(request, chunk("a", finished=True))
    blocker.gate.set()
    wait_for(lambda: len(slow.sent) == 4)
    wait_for(lambda: set_to == [0.005, 0.0005, 0.005])
    assert interval.hurries == 1
    # behind from 10 ms into the batch until its four 6-ms sends were done: at least the last two sends' time
    assert 0.010 <= lanes.behind.seconds() < 5
    lanes.stop()


def test_a_thread_that_keeps_up_leaves_the_interval_alone():
    set_to = []
    interval = SwitchInterval(0.005, 0.0005, set_interval=set_to.append)
    lanes = ResponseLanes(2, FakeIO(), lambda r: None, lambda r, o: None, print, LanesBehind(interval.lanes_behind))
    sender = FakeSender()
    for i in range(20):
        request = InflightRequest(f"r{i}", sender, OutputOptions())
        lanes.register(request)
        lanes.send_chunk(request, chunk("a", finished=True))
    wait_for(lambda: len(sender.sent) == 20)
    lanes.stop()
    assert set_to == [0.005] and interval.hurries == 0 and lanes.behind.seconds() == 0
