"""The histogram class the stat logger swaps in, and the replay that makes a Triton histogram equal to it.

A Triton custom histogram only has `observe(value)`: one IPC round trip per observation, and no way to add a
bucket's count or sum at once. To publish vLLM's histograms as Triton HISTOGRAM families from the publisher thread
(never from vLLM's event loop), each interval's change is replayed: per bucket, its count increase as that many
observations of the mean of the values that fell into it. The mean of values in (lower, upper] lies in
(lower, upper], so every `_bucket{le}` and `_count` of Triton's family equal prometheus_client's exactly and `_sum`
equals it up to float rounding. That needs the sum per bucket, which prometheus_client does not keep: this class
keeps it, under one lock with the bucket counts so that a snapshot never sees one without the other.

The class also keeps the counts itself rather than in prometheus_client's values, because of what an observation
costs on vLLM's event loop, where vLLM observes the inter-token latency once per generated token: prometheus_client
takes a lock for the sum and another for the bucket it finds by scanning the bounds one by one (≈ 1.1 µs an
observation of an inter-token latency on this project's CPU machine; ≈ 1.8 µs with a bucket sum kept beside it
under a third lock), here one bisect and one lock (≈ 0.75 µs). Its exposition is prometheus_client's, sample for
sample.
"""

from __future__ import annotations

import math
import threading
import time
from bisect import bisect_left
from collections.abc import Iterator
from dataclasses import dataclass

import prometheus_client.metrics
from prometheus_client import Histogram
from prometheus_client.samples import Exemplar, Sample
from prometheus_client.utils import floatToGoString


@dataclass(frozen=True)
class BucketState:
    """Per bucket (not cumulative, `+Inf` last): how many observations fell into it and their sum."""

    counts: tuple[float, ...]
    sums: tuple[float, ...]

    @classmethod
    def empty(cls, buckets: int) -> BucketState:
        return cls((0.0,) * buckets, (0.0,) * buckets)


class ReplayableHistogram(Histogram):
    """prometheus_client's Histogram (vLLM's full API, its exposition unchanged) that keeps each bucket's count and
    sum under one lock."""

    def _metric_init(self) -> None:
        self._created = time.time()
        self._replay_lock = threading.Lock()
        buckets = len(self._upper_bounds)
        self._bucket_counts = [0.0] * buckets
        self._bucket_sums = [0.0] * buckets
        self._total = 0.0  # prometheus_client's `_sum`: added in observation order, NaN included
        self._exemplars: list[Exemplar | None] = [None] * buckets

    def observe(self, amount: float, exemplar: dict[str, str] | None = None) -> None:
        self._raise_if_not_observable()
        if math.isnan(amount):  # prometheus_client adds a NaN to the sum and counts it in no bucket
            with self._replay_lock:
                self._total += amount
            return
        bucket = bisect_left(self._upper_bounds, amount)  # the first bound >= amount: `le` semantics, +Inf last
        kept = None
        if exemplar:
            prometheus_client.metrics._validate_exemplar(exemplar)
            kept = Exemplar(exemplar, amount, time.time())
        with self._replay_lock:
            self._bucket_counts[bucket] += 1.0
            self._bucket_sums[bucket] += amount
            self._total += amount
            if kept is not None:
                self._exemplars[bucket] = kept

    def _child_samples(self) -> tuple[Sample, ...]:
        """prometheus_client's samples of a histogram, from this class's counts."""
        with self._replay_lock:
            counts, total, exemplars = list(self._bucket_counts), self._total, list(self._exemplars)
        samples = []
        cumulative = 0.0
        for bound, count, exemplar in zip(self._upper_bounds, counts, exemplars, strict=True):
            cumulative += count
            samples.append(Sample("_bucket", {"le": floatToGoString(bound)}, cumulative, None, exemplar))
        samples.append(Sample("_count", {}, cumulative, None, None))
        if self._upper_bounds[0] >= 0:
            samples.append(Sample("_sum", {}, total, None, None))
        if prometheus_client.metrics._use_created:
            samples.append(Sample("_created", {}, self._created, None, None))
        return tuple(samples)

    @property
    def upper_bounds(self) -> tuple[float, ...]:
        return tuple(self._upper_bounds)

    def bucket_state(self) -> BucketState:
        with self._replay_lock:
            return BucketState(tuple(self._bucket_counts), tuple(self._bucket_sums))

    def children(self) -> Iterator[tuple[dict[str, str], ReplayableHistogram]]:
        """Each series (one per label set; the histogram itself when it has no labels)."""
        if not self._labelnames:
            yield {}, self
            return
        with self._lock:
            items = list(self._metrics.items())
        for values, child in items:
            yield dict(zip(self._labelnames, values, strict=True)), child


def replay(previous: BucketState, current: BucketState, upper_bounds: tuple[float, ...]) -> list[tuple[float, int]]:
    """The observations (value, times) that take a histogram at `previous` to `current`, bucket by bucket.

    A bucket whose count did not grow contributes nothing (its sum cannot have changed without an observation).
    Where the bucket's sum is a whole number (token counts, `n`), whole numbers in the bucket with that total are
    replayed — the floor and the ceiling of the mean — so `_sum` is exact, not only up to rounding.
    """
    observations = []
    lower = -math.inf
    for upper, before, now, sum_before, sum_now in zip(upper_bounds, previous.counts, current.counts,
                                                        previous.sums, current.sums, strict=True):
        times = int(round(now - before))
        total = sum_now - sum_before
        if times > 0:
            observations += _whole(total, times, lower, upper) or [(_inside(total / times, lower, upper), times)]
        lower = upper
    return observations


def _whole(total: float, times: int, lower: float, upper: float) -> list[tuple[float, int]]:
    """`times` whole numbers in (lower, upper] adding up to `total` exactly, if there are such."""
    if not (total.is_integer() and abs(total) < 2 ** 53):
        return []
    floor, above = divmod(int(total), times)  # `above` observations of floor + 1, the rest of floor
    if not (lower < floor <= upper and (above == 0 or floor + 1 <= upper)):
        return []
    return [(float(v), n) for v, n in ((floor, times - above), (floor + 1, above)) if n]


def _inside(value: float, lower: float, upper: float) -> float:
    """The value, kept in (lower, upper] against float rounding of the mean (Triton buckets it with `<=` too)."""
    if value > upper:
        return upper
    if value <= lower:
        return math.nextafter(lower, math.inf)
    return value
