"""The private registry, the guarded stat logger and the publisher, against a fake pb_utils (the real one is
tested end to end)."""

import pytest

from vllm_triton_observable.metrics import names
from vllm_triton_observable.metrics.errors import MetricErrors
from vllm_triton_observable.metrics.publisher import TritonPublisher
from vllm_triton_observable.metrics.registry import InstanceRegistry, Kind, exposed_name


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
    refuse: set = set()

    def __init__(self, name, description, kind):
        if name in FakeFamily.refuse:
            raise RuntimeError(f"refused {name}")
        self.name, self.kind, self.metrics = name, kind, []
        FakeFamily.created[name] = self

    def Metric(self, labels):  # noqa: N802 - pb_utils' spelling
        metric = FakeMetric(labels)
        self.metrics.append(metric)
        return metric


class FakePb:
    MetricFamily = FakeFamily


@pytest.fixture(autouse=True)
def fresh_fakes():
    FakeFamily.created, FakeFamily.refuse = {}, set()


def value(name, **labels):
    return sum(m.value for m in FakeFamily.created[name].metrics
               if all(m.labels.get(k) == v for k, v in labels.items()))


def calls():
    return sum(m.calls for f in FakeFamily.created.values() for m in f.metrics)


def setup(labels=None):
    logged = []
    registry = InstanceRegistry(labels or {"model": "m"})
    errors = MetricErrors(registry, logged.append)
    return registry, errors, TritonPublisher(registry, FakePb, errors), logged


def test_exposed_names_follow_prometheus_client():
    assert exposed_name("vllm:prompt_tokens", Kind.COUNTER) == "vllm:prompt_tokens_total"
    assert exposed_name("vllm:estimated_flops_per_gpu_total", Kind.COUNTER) == "vllm:estimated_flops_per_gpu_total"
    assert exposed_name("vllm:iteration_tokens_total", Kind.HISTOGRAM) == "vllm:iteration_tokens_total"


def test_specs_describe_families_with_the_constant_labels():
    registry, _, _, _ = setup()
    registry.classes()[Kind.HISTOGRAM]("vllm:x_seconds", "doc", labelnames=["engine"], buckets=[0.1, 1.0])
    spec = registry.specs["vllm:x_seconds"]
    assert spec.kind is Kind.HISTOGRAM and spec.labelnames == ("engine", "model") and spec.buckets == (0.1, 1.0)
    assert spec.sample_names == ("vllm:x_seconds_bucket", "vllm:x_seconds_sum", "vllm:x_seconds_count")


def test_histograms_publish_exact_cumulative_buckets_with_few_calls():
    registry, _, publisher, _ = setup()
    child = registry.classes()[Kind.HISTOGRAM]("vllm:x_seconds", "doc", labelnames=["engine"],
                                              buckets=[0.1, 1.0, 10.0]).labels("0")
    publisher.flush()  # every bucket series exists before any observation
    assert value("vllm:x_seconds_bucket", le="+Inf") == 0
    assert len(FakeFamily.created["vllm:x_seconds_bucket"].metrics) == 4
    assert FakeFamily.created["vllm:x_seconds_bucket"].metrics[0].labels == {"engine": "0", "le": "0.1", "model": "m"}
    before = calls()
    for v in [0.05, 0.5, 0.5, 5.0, 50.0] * 100:
        child.observe(v)
    publisher.flush()
    assert value("vllm:x_seconds_bucket", le="0.1") == 100
    assert value("vllm:x_seconds_bucket", le="1.0") == 300
    assert value("vllm:x_seconds_bucket", le="10.0") == 400
    assert value("vllm:x_seconds_bucket", le="+Inf") == 500
    assert value("vllm:x_seconds_count") == 500
    assert abs(value("vllm:x_seconds_sum") - 100 * 56.05) < 1e-6
    assert calls() - before == 6  # one call per changed series, not one per observation
    publisher.flush()
    assert calls() - before == 6  # nothing changed, nothing sent
    assert "vllm:x_seconds_created" not in FakeFamily.created


def test_counters_gauges_and_the_full_prometheus_client_api():
    registry, _, publisher, _ = setup()
    classes = registry.classes()
    counter = classes[Kind.COUNTER]("vllm:tokens", "doc", labelnames=["engine"])
    gauge = classes[Kind.GAUGE]("vllm:running", "doc", labelnames=["engine"])
    for _ in range(50):
        counter.labels("0").inc(2)
        gauge.labels("0").set(3)
    gauge.labels("0").dec()
    gauge.labels("1").set_function(lambda: 7)
    gauge.remove("1")
    publisher.flush()
    assert value("vllm:tokens_total") == 100 and value("vllm:running") == 2


def test_a_restarted_engine_continues_monotonic_series():
    registry, _, publisher, _ = setup()
    registry.classes()[Kind.COUNTER]("vllm:tokens", "doc", labelnames=["engine"]).labels("0").inc(10)
    publisher.flush()
    # an engine restarted in place creates its metrics again (no duplicate-name error); its counters start at 0
    again = registry.classes()[Kind.COUNTER]("vllm:tokens", "doc", labelnames=["engine"])
    again.labels("0").inc(3)
    publisher.flush()
    assert value("vllm:tokens_total") == 13
    again.labels("0").inc(1)
    publisher.flush()
    assert value("vllm:tokens_total") == 14
    assert len(FakeFamily.created["vllm:tokens_total"].metrics) == 1


def test_refused_family_is_reported_once_and_the_rest_is_published():
    registry, _, publisher, logged = setup()
    classes = registry.classes()
    classes[Kind.GAUGE]("bad_family", "doc").set(1)
    classes[Kind.GAUGE]("good_family", "doc").set(2)
    FakeFamily.refuse = {"bad_family"}
    for _ in range(3):
        publisher.flush()
    assert value("good_family") == 2
    assert sum("bad_family" in line for line in logged) == 1
    assert value(names.METRICS_ERRORS, stage="publish") == 1


def test_a_failing_stat_logger_is_counted_logged_once_and_never_raises():
    from vllm.v1.metrics.loggers import PrometheusStatLogger

    from vllm_triton_observable.metrics.stat_logger import stat_logger_class

    registry, errors, publisher, logged = setup()
    logger_class = stat_logger_class(registry, errors)
    assert issubclass(logger_class, PrometheusStatLogger)
    logger = object.__new__(logger_class)  # record() fails on a logger that was never initialised
    for _ in range(5):
        logger.record(object(), object())
    assert registry.last_record is not None
    publisher.flush()
    assert value(names.METRICS_ERRORS, stage="record") == 5
    assert len([line for line in logged if "metrics record failed" in line]) == 1


def test_the_official_backends_inter_token_latency_name_gets_the_same_observations():
    from vllm.v1.metrics.stats import IterationStats

    from vllm_triton_observable.metrics.catalogue import BASE_ENGINE, vllm_config
    from vllm_triton_observable.metrics.stat_logger import stat_logger_class

    registry, errors, publisher, logged = setup()
    logger = stat_logger_class(registry, errors)(vllm_config(BASE_ENGINE), [0])
    stats = IterationStats()
    stats.inter_token_latencies_iter = [0.004, 0.03, 0.3]
    logger.record(None, stats)
    publisher.flush()
    for suffix, expected in (("_count", 3), ("_sum", 0.334)):
        assert value(f"{names.VLLM_INTER_TOKEN_LATENCY}{suffix}") == pytest.approx(expected)
        assert value(f"{names.VLLM_TIME_PER_OUTPUT_TOKEN_OFFICIAL}{suffix}") == pytest.approx(expected)
    itl, official = (registry.specs[n] for n in (names.VLLM_INTER_TOKEN_LATENCY,
                                                 names.VLLM_TIME_PER_OUTPUT_TOKEN_OFFICIAL))
    assert (itl.labelnames, itl.buckets) == (official.labelnames, official.buckets) and not logged


def test_records_while_paused_are_left_out():
    """The backend's own requests (a new engine's warm-up) run when no client's do: they are not counted."""
    from vllm.v1.metrics.stats import IterationStats

    from vllm_triton_observable.metrics.catalogue import BASE_ENGINE, vllm_config
    from vllm_triton_observable.metrics.stat_logger import stat_logger_class

    registry, errors, publisher, logged = setup()
    own_request = [True]
    logger = stat_logger_class(registry, errors, paused=lambda: own_request[0])(vllm_config(BASE_ENGINE), [0])
    stats = IterationStats()
    stats.num_generation_tokens = 5
    logger.record(None, stats)
    assert registry.last_record is None
    own_request[0] = False
    logger.record(None, stats)
    publisher.flush()
    assert value(f"{names.VLLM_GENERATION_TOKENS}") == 5 and registry.last_record is not None and not logged
