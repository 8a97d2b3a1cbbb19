"""The in-memory metric classes and the publisher, against a fake pb_utils (the real one is tested end to end)."""

from metrics.local import Kind, MetricStore, bound_classes, exposed_name
from metrics.publisher import TritonPublisher


class FakeMetric:
    def __init__(self, labels):
        self.labels, self.value, self.calls = labels, 0.0, 0

    def increment(self, amount):
        assert amount >= 0
        self.value += amount
        self.calls += 1

    def set(self, value):
        self.value = value
        self.calls += 1


class FakeFamily:
    COUNTER, GAUGE = "counter", "gauge"
    created: dict = {}

    def __init__(self, name, description, kind):
        self.name, self.kind, self.metrics = name, kind, []
        FakeFamily.created[name] = self

    def Metric(self, labels):  # noqa: N802 - pb_utils' spelling
        metric = FakeMetric(labels)
        self.metrics.append(metric)
        return metric


class FakePb:
    MetricFamily = FakeFamily


def value(name, **labels):
    return sum(m.value for m in FakeFamily.created[name].metrics
               if all(m.labels.get(k) == v for k, v in labels.items()))


def test_exposed_names_follow_prometheus_client():
    assert exposed_name("vllm:prompt_tokens", Kind.COUNTER) == "vllm:prompt_tokens_total"
    assert exposed_name("vllm:estimated_flops_per_gpu_total", Kind.COUNTER) == "vllm:estimated_flops_per_gpu_total"
    assert exposed_name("vllm:iteration_tokens_total", Kind.HISTOGRAM) == "vllm:iteration_tokens_total"


def test_histograms_publish_exact_cumulative_buckets_with_few_calls():
    FakeFamily.created = {}
    store = MetricStore()
    classes = bound_classes(store, {"model": "m"})
    histogram = classes[Kind.HISTOGRAM]("vllm:x_seconds", "doc", labelnames=["engine"], buckets=[0.1, 1.0, 10.0])
    child = histogram.labels("0")
    publisher = TritonPublisher(store, FakePb, print)
    publisher.flush()  # every bucket series exists before any observation
    assert value("vllm:x_seconds_bucket", le="+Inf") == 0
    assert len(FakeFamily.created["vllm:x_seconds_bucket"].metrics) == 4
    for v in [0.05, 0.5, 0.5, 5.0, 50.0] * 100:
        child.observe(v)
    publisher.flush()
    assert value("vllm:x_seconds_bucket", le="0.1") == 100
    assert value("vllm:x_seconds_bucket", le="1.0") == 300
    assert value("vllm:x_seconds_bucket", le="10.0") == 400
    assert value("vllm:x_seconds_bucket", le="+Inf") == 500
    assert value("vllm:x_seconds_count") == 500
    assert abs(value("vllm:x_seconds_sum") - 100 * 56.05) < 1e-6
    calls = sum(m.calls for f in FakeFamily.created.values() for m in f.metrics)
    assert calls <= 6  # one call per changed bucket + sum + count, not one per observation


def test_counters_and_gauges_publish_once_per_flush_and_series_are_shared_after_restart():
    FakeFamily.created = {}
    store = MetricStore()
    classes = bound_classes(store, {"model": "m"})
    counter = classes[Kind.COUNTER]("vllm:tokens", "doc", labelnames=["engine"])
    gauge = classes[Kind.GAUGE]("vllm:running", "doc", labelnames=["engine"])
    for _ in range(50):
        counter.labels("0").inc(2)
        gauge.labels("0").set(3)
    publisher = TritonPublisher(store, FakePb, print)
    publisher.flush()
    assert value("vllm:tokens_total") == 100 and value("vllm:running") == 3
    # an engine restarted in place creates its metrics again: the same series continue
    again = bound_classes(store, {"model": "m"})[Kind.COUNTER]("vllm:tokens", "doc", labelnames=["engine"])
    again.labels("0").inc(1)
    publisher.flush()
    assert value("vllm:tokens_total") == 101
    assert len(FakeFamily.created["vllm:tokens_total"].metrics) == 1


def test_overflow_is_counted_not_unbounded():
    store = MetricStore(max_pending_observations=10)
    histogram = bound_classes(store, {})[Kind.HISTOGRAM]("vllm:y", "doc", buckets=[1.0])
    for _ in range(25):
        histogram.observe(0.5)
    assert store.pending_observations == 10 and store.dropped_updates == 15
