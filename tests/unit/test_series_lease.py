"""One load of a model instance at a time publishes its series (metrics.series_lease): the lease itself, across
processes, and the publisher that waits for it (against the fake pb_utils of test_metrics_pipeline; the reload
itself is tested end to end in test_lifecycle.py and test_shared_engine.py)."""

import subprocess
import sys

from test_metrics_pipeline import FakeFamily, fresh_fakes, setup, value  # noqa: F401 - fresh_fakes: autouse here too

from vllm_triton_observable.metrics.registry import Kind
from vllm_triton_observable.metrics.series_lease import SeriesLease

LABELS = {"model": "m", "version": "1", "model_instance": "m_0_0"}


def lease(tmp_path, said=None, labels=LABELS):
    return SeriesLease.for_labels(tmp_path / "series", labels, (said if said is not None else []).append)


def test_one_holder_at_a_time_and_the_wait_is_said_once_with_its_end(tmp_path):
    said = []
    old, new = lease(tmp_path), lease(tmp_path, said)
    assert old.try_acquire() and old.held
    assert not new.try_acquire() and not new.try_acquire() and not new.held
    assert len(said) == 1 and "model=m, model_instance=m_0_0, version=1 are still published by an earlier load" in (
        said[0])
    old.release()
    assert new.try_acquire() and new.held
    assert len(said) == 2 and said[1].startswith("metrics: the earlier load released the series of model=m")
    assert new.try_acquire() and len(said) == 2  # held: nothing more to say


def test_other_labels_are_other_leases(tmp_path):
    assert lease(tmp_path).try_acquire()
    assert lease(tmp_path, labels={**LABELS, "model_instance": "m_0_1"}).try_acquire()
    assert lease(tmp_path, labels={**LABELS, "version": "2"}).try_acquire()


def test_a_holder_that_dies_releases_it(tmp_path):
    """However the old load's stub ends (killed included), its lease goes with it."""
    script = ("import sys, time; from pathlib import Path; "
              "from vllm_triton_observable.metrics.series_lease import SeriesLease; "
              f"l = SeriesLease.for_labels(Path(sys.argv[1]), {LABELS!r}, print); "
              "assert l.try_acquire(); print('held', flush=True); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "series")], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        waiting = lease(tmp_path)
        assert not waiting.try_acquire()
        holder.kill()
        holder.wait(10)
        assert waiting.try_acquire()
    finally:
        holder.kill()


def test_the_publisher_creates_nothing_in_triton_until_it_holds_the_lease(tmp_path):
    old = lease(tmp_path)
    assert old.try_acquire()
    registry, _, publisher, _ = setup(labels=LABELS, lease=lease(tmp_path))
    registry.classes()[Kind.COUNTER]("vllm:tokens", "doc", labelnames=["engine"]).labels("0").inc(5)
    publisher.flush()
    assert FakeFamily.created == {}  # not even a family: the old load's series are the ones on /metrics
    old.release()
    publisher.flush()
    assert value("vllm:tokens_total") == 5  # what it counted while it waited, published whole


def test_the_publisher_releases_the_lease_after_its_series(tmp_path):
    _, _, publisher, _ = setup(labels=LABELS, lease=lease(tmp_path))
    publisher.flush()
    assert not lease(tmp_path).try_acquire()
    publisher.stop()
    assert lease(tmp_path).try_acquire()
