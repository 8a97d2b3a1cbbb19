"""The one start/stop shape of the backend's background threads (common.owned_thread)."""

from __future__ import annotations

import threading
import time

from vllm_triton_observable.common.owned_thread import OwnedThread


def test_stop_sets_the_event_wakes_the_thread_and_joins_it():
    woken = threading.Event()
    owned: OwnedThread

    def run() -> None:
        woken.wait(5)  # waits on something other than the stop event
        assert owned.stopping.is_set()

    owned = OwnedThread(run, "test-owned", wake=woken.set)
    owned.start()
    assert owned.is_alive()
    started = time.monotonic()
    assert owned.stop() and not owned.is_alive() and time.monotonic() - started < 1


def test_a_thread_that_does_not_end_is_given_up_after_its_bound():
    release = threading.Event()
    owned = OwnedThread(lambda: release.wait(5), "test-stuck", join_timeout_s=0.1)
    owned.start()
    started = time.monotonic()
    assert owned.stop() is False and 0.1 <= time.monotonic() - started < 1
    release.set()


def test_the_thread_may_stop_its_own_component_without_waiting_on_itself():
    results = []
    owned: OwnedThread

    def run() -> None:
        results.append(owned.stop())  # e.g. the unload watch closing the model it watches

    owned = OwnedThread(run, "test-self", join_timeout_s=5)
    started = time.monotonic()
    owned.start()
    owned.stop()
    assert results == [False] and time.monotonic() - started < 1 and owned.stopping.is_set()


def test_stopping_a_thread_that_never_started_returns_at_once():
    assert OwnedThread(lambda: None, "test-never").stop()
