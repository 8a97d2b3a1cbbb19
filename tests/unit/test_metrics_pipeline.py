"""The private registry, the guarded stat logger and the publisher, against a fake pb_utils (the real one is
tested end to end)."""

import pytest

from vllm_triton_observable.metrics import names
from vllm_triton_observable.metrics.errors import MetricErrors
from vllm_triton_observable.metrics.publisher import TritonPublisher
from vllm_triton_observable.metrics.registry import InstanceRegistry, Kind, exposed_name, le_label


class FakeMetric:
    """A counter or gauge as Triton 2.51's pb_utils has them (a counter refuses a negative increment)."""

    def __init__(self, labels, kind):
        self.labels, self.kind, self.value, self.calls, self.sets = labels, kind, 0.0, 0, 0

    def increment(self, amount):
        assert amount >= 0 or self.kind == FakeFamily.GAUGE
        self.value += amount
        self.calls += 1

    def set(self, value):
        assert self.kind == FakeFamily.GAUGE
        self.value = value
        self.calls += 1
        self.sets += 1


class FakeHistogram:
    """A Triton histogram: observe() only, bucketed with `<=` like prometheus-cpp."""

    def __init__(self, labels, buckets):
        self.labels, self.buckets, self.observed, self.calls = labels, list(buckets), [], 0

    def observe(self, value):
        self.observed.append(value)
        self.calls += 1

    def bucket(self, le):
        return sum(v <= le for v in self.observed)


class FakeFamily:
    COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"
    created: dict = {}
    refuse: set = set()

    def __init__(self, name, description, kind):
        if name in FakeFamily.refuse:
            raise RuntimeError(f"refused {name}")
        self.name, self.kind, self.metrics = name, kind, []
        FakeFamily.created[name] = self

    def Metric(self, labels, buckets=None):  # noqa: N802 - pb_utils' spelling
        assert (buckets is not None) == (self.kind == FakeFamily.HISTOGRAM)
        metric = FakeHistogram(labels, buckets) if buckets is not None else FakeMetric(labels, self.kind)
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


def setup(labels=None, **options):
    logged = []
    registry = InstanceRegistry(labels or {"model": "m"})
    errors = MetricErrors(registry, logged.append)
    return registry, errors, TritonPublisher(registry, FakePb, errors, **options), logged


def exposition(registry):
    """prometheus_client's own rendering of the registry, as {(series name, labels): value}."""
    from prometheus_client import generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(generate_latest(registry).decode())
            for s in family.samples if not s.name.endswith("_created")}


def triton_histogram(name):
    """The fake Triton histogram of `name` as the series Triton would expose ({(series, labels): value})."""
    series = {}
    for metric in FakeFamily.created[name].metrics:
        labels = {k: v for k, v in metric.labels.items() if k != "model"}

        def key(suffix, labels=labels, **extra):
            return name + suffix, tuple(sorted({**labels, **extra}.items()))

        for le in [*metric.buckets, float("inf")]:
            series[key("_bucket", le=le_label(le))] = metric.bucket(le)
        series[key("_count")] = len(metric.observed)
        series[key("_sum")] = sum(metric.observed)
    return series


def assert_equal_exposition(registry, name):
    expected = {k: v for k, v in exposition(registry).items() if k[0].rsplit("_", 1)[0] == name}
    published = triton_histogram(name)
    assert published.keys() == expected.keys()
    for key, value_ in expected.items():
        assert published[key] == pytest.approx(value_, rel=1e-12, abs=1e-12), key


def test_exposed_names_follow_prometheus_client():
    assert exposed_name("vllm:prompt_tokens", Kind.COUNTER) == "vllm:prompt_tokens_total"
    assert exposed_name("vllm:estimated_flops_per_gpu_total", Kind.COUNTER) == "vllm:estimated_flops_per_gpu_total"
    assert exposed_name("vllm:iteration_tokens_total", Kind.HISTOGRAM) == "vllm:iteration_tokens_total"


def test_specs_describe_families_with_the_constant_labels():
    registry, _, publisher, _ = setup()
    registry.classes()[Kind.HISTOGRAM]("vllm:x_seconds", "doc", labelnames=["engine"], buckets=[0.1, 1.0])
    spec = registry.specs["vllm:x_seconds"]
    assert spec.kind is Kind.HISTOGRAM and spec.labelnames == ("engine", "model") and spec.buckets == (0.1, 1.0)
    assert spec.sample_names == ("vllm:x_seconds_bucket", "vllm:x_seconds_sum", "vllm:x_seconds_count")


def test_histograms_are_triton_histograms_equal_to_prometheus_clients_exposition():
    registry, _, publisher, _ = setup()
    histogram = registry.classes()[Kind.HISTOGRAM]("vllm:x_seconds", "doc", labelnames=["engine"],
                                                  buckets=[0.1, 1.0, 10.0])
    child = histogram.labels("0")
    publisher.flush()  # the family and its series exist before any observation
    family = FakeFamily.created["vllm:x_seconds"]
    assert family.kind == FakeFamily.HISTOGRAM and family.metrics[0].buckets == [0.1, 1.0, 10.0]
    assert family.metrics[0].labels == {"engine": "0", "model": "m"} and not family.metrics[0].observed
    assert not any(name.startswith("vllm:x_seconds_") for name in FakeFamily.created)
    values = [0.05, 0.1, 0.5, 0.3, 1.0, 5.0, 50.0, 1e-9, 0.1 + 0.2, 10.0]  # bounds themselves included
    for round_ in range(3):
        for v in values * (round_ + 1):
            child.observe(v)
        histogram.labels("1").observe(0.7)  # a series born between publishes
        publisher.flush()
        assert_equal_exposition(registry, "vllm:x_seconds")
    before = calls()
    publisher.flush()
    assert calls() == before  # nothing changed, nothing sent
    assert "vllm:x_seconds_created" not in FakeFamily.created


@pytest.mark.parametrize("labelnames", [(), ("engine",)], ids=["no labels", "labels"])
def test_the_histogram_exposes_what_prometheus_clients_own_does(labelnames, monkeypatch):
    """The swapped class keeps its own counts: its exposition, exemplars and `_created` included, is prometheus_client's
    sample for sample, for every kind of value (a bound itself, ±inf, a negative one, NaN)."""
    import math
    import time

    from prometheus_client import CollectorRegistry, Histogram
    from prometheus_client.openmetrics.exposition import generate_latest

    from vllm_triton_observable.metrics.histogram import ReplayableHistogram

    values = [0.05, 0.1, 1.0, 0.1 + 0.2, 7.0, 10.0, 1e9, math.inf, -math.inf, -2.0, math.nan, 3, 0.0]
    monkeypatch.setattr(time, "time", lambda: 5.0)  # `_created` and the exemplars' times

    def exposition_of(cls, buckets):
        registry = CollectorRegistry()
        histogram = cls("x_seconds", "doc", labelnames=labelnames, buckets=buckets, registry=registry)
        series = histogram.labels("0") if labelnames else histogram
        with pytest.raises(ValueError):
            (histogram.observe if labelnames else histogram.labels)(1.0)  # the parent of labelled series refuses
        for i, v in enumerate(values):
            series.observe(v, {"trace_id": f"t{i}"} if i % 4 == 0 else None)
        return generate_latest(registry).decode().replace('engine="0",', "").replace('{engine="0"}', "")

    for buckets in ([0.1, 1.0, 10.0], [-1.0, 0.0, 1.0]):  # below 0: prometheus_client writes no _sum
        assert exposition_of(ReplayableHistogram, buckets) == exposition_of(Histogram, buckets)
    ours = exposition_of(ReplayableHistogram, [0.1, 1.0, 10.0])
    assert 'x_seconds_bucket{le="0.1"} 5.0 # {trace_id="t12"} 0.0 5.0' in ours and "x_seconds_count 12.0" in ours
    assert "x_seconds_sum" not in exposition_of(ReplayableHistogram, [-1.0, 0.0, 1.0])


def test_a_bucket_state_is_each_buckets_count_and_sum():
    from vllm_triton_observable.metrics.histogram import ReplayableHistogram

    registry = InstanceRegistry({"model": "m"})
    histogram = registry.classes()[Kind.HISTOGRAM]("vllm:x_seconds", "doc", buckets=[0.1, 1.0])
    assert isinstance(histogram, ReplayableHistogram)
    for v in (0.05, 0.1, 0.5, 2.0, 3.0, float("nan")):
        histogram.observe(v)
    state = histogram.bucket_state()
    assert state.counts == (2.0, 1.0, 2.0) and state.sums == pytest.approx((0.15, 0.5, 5.0))


def test_each_replayed_observation_stays_in_its_bucket_against_rounding():
    import math

    from vllm_triton_observable.metrics.histogram import BucketState, replay

    bounds = (0.1, 1.0, math.inf)
    # three observations exactly at 0.1 whose float sum divided by 3 is not below 0.1 + one ulp
    state = BucketState((3.0, 0.0, 1.0), (0.1 + 0.1 + 0.1, 0.0, 7.0))
    observations = replay(BucketState.empty(3), state, bounds)
    assert observations == [(0.1, 3), (7.0, 1)]
    assert replay(BucketState((0.0, 0.0, 0.0), (0.0, 0.0, 0.0)), BucketState((1.0, 0, 0), (-5.0, 0, 0)), bounds) \
        == [(-5.0, 1)]
    assert replay(state, BucketState((3.0, 1.0, 1.0), (0.3, 0.1, 7.0)), bounds) == [(math.nextafter(0.1, 2), 1)]


def test_whole_numbers_are_replayed_as_whole_numbers_with_the_exact_sum():
    from vllm_triton_observable.metrics.histogram import BucketState, replay

    bounds = (1.0, 8.0, float("inf"))
    state = BucketState((1.0, 3.0, 2.0), (1.0, 5 + 5 + 6, 100 + 37))  # 5, 5, 6 fell into (1, 8]
    observations = replay(BucketState.empty(3), state, bounds)
    assert observations == [(1.0, 1), (5.0, 2), (6.0, 1), (68.0, 1), (69.0, 1)]
    assert sum(v * n for v, n in observations) == 1 + 16 + 137
    # 0.5 + 0.5: no two whole numbers up to 0.5 add up to 1, so the mean is replayed
    assert replay(BucketState.empty(2), BucketState((2.0, 0.0), (1.0, 0.0)), (0.5, float("inf"))) == [(0.5, 2)]


def test_per_token_histograms_can_be_published_as_their_counter_series():
    registry, _, publisher, _ = setup(as_series=["vllm:x_seconds"])
    child = registry.classes()[Kind.HISTOGRAM]("vllm:x_seconds", "doc", labelnames=["engine"],
                                              buckets=[0.1, 1.0, 10.0]).labels("0")
    publisher.flush()  # every bucket series exists before any observation
    assert "vllm:x_seconds" not in FakeFamily.created
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


def test_gauges_move_by_increments_and_stay_exact():
    """Triton 2.51's set() holds the GIL for its round trip; increment() does not."""
    registry, _, publisher, _ = setup()
    gauge = registry.classes()[Kind.GAUGE]("vllm:usage", "doc")
    for v in [0.0, 0.1, 0.30000000000000004, 1 / 3, 1e-300, 1.7e9, 1.7e9 + 0.123, -2.5, 0.0, float("inf"), 4.0]:
        gauge.set(v)
        publisher.flush()
        assert value("vllm:usage") == v
    metric = FakeFamily.created["vllm:usage"].metrics[0]
    assert metric.sets <= 3 and metric.calls > 8
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
    publisher.flush()
    assert value(names.METRICS_ERRORS, stage="record") == 5
    assert len([line for line in logged if "metrics record failed" in line]) == 1


@pytest.mark.parametrize("as_series", [names.PER_TOKEN_HISTOGRAMS, ()], ids=["series", "histogram"])
def test_the_official_backends_inter_token_latency_name_gets_the_same_observations(as_series):
    from vllm.v1.metrics.stats import IterationStats

    from vllm_triton_observable.metrics.catalogue import BASE_ENGINE, vllm_config
    from vllm_triton_observable.metrics.stat_logger import stat_logger_class

    registry, errors, publisher, logged = setup(as_series=as_series)
    logger = stat_logger_class(registry, errors)(vllm_config(BASE_ENGINE), [0])
    stats = IterationStats()
    stats.inter_token_latencies_iter = [0.004, 0.03, 0.3]
    logger.record(None, stats)
    publisher.flush()
    for name in (names.VLLM_INTER_TOKEN_LATENCY, names.VLLM_TIME_PER_OUTPUT_TOKEN_OFFICIAL):
        if as_series:
            assert value(f"{name}_count") == 3 and value(f"{name}_sum") == pytest.approx(0.334)
        else:
            assert sorted(FakeFamily.created[name].metrics[0].observed) == [0.004, 0.03, 0.3]
    itl, official = (registry.specs[n] for n in (names.VLLM_INTER_TOKEN_LATENCY,
                                                 names.VLLM_TIME_PER_OUTPUT_TOKEN_OFFICIAL))
    assert (itl.labelnames, itl.buckets) == (official.labelnames, official.buckets) and not logged


def test_a_restarted_engines_histogram_continues_where_the_old_one_ended():
    registry, _, publisher, _ = setup()
    make = lambda: registry.classes()[Kind.HISTOGRAM]("vllm:x_seconds", "doc", labelnames=["engine"],  # noqa: E731
                                                      buckets=[0.1, 1.0])
    first = make()
    for v in (0.05, 0.5, 5.0):
        first.labels("0").observe(v)
    publisher.flush()
    again = make()  # created anew, as by an engine restarted in place: its buckets start at 0
    again.labels("0").observe(0.5)
    publisher.flush()
    assert sorted(FakeFamily.created["vllm:x_seconds"].metrics[0].observed) == [0.05, 0.5, 0.5, 5.0]
    assert len(FakeFamily.created["vllm:x_seconds"].metrics) == 1


def test_a_replay_failing_half_way_is_not_sent_twice():
    """Triton's histogram may lag vLLM's by what a failed publish did not send, but never counts one twice."""
    registry, errors, publisher, logged = setup()
    histogram = registry.classes()[Kind.HISTOGRAM]("vllm:x_seconds", "doc", buckets=[0.1, 1.0])
    publisher.flush()
    triton = FakeFamily.created["vllm:x_seconds"].metrics[0]
    real_observe, sent = triton.observe, []

    def observe_once_then_fail(value):
        if sent:
            raise RuntimeError("the stub lost its connection to the server")
        sent.append(value)
        real_observe(value)

    triton.observe = observe_once_then_fail
    for v in (0.05, 0.5, 5.0):
        histogram.observe(v)
    publisher.flush()
    assert sent == [0.05] and logged  # half-way, and reported
    triton.observe = real_observe
    publisher.flush()
    histogram.observe(0.5)
    publisher.flush()
    assert sorted(triton.observed) == [0.05, 0.5]  # the failed interval is not replayed again; later ones are


def test_a_change_is_published_at_once_and_changes_are_coalesced():
    import time

    from vllm_triton_observable.metrics.publisher import MIN_GAP_S

    registry, _, publisher, _ = setup(interval_s=60.0)  # without changed(), nothing would publish for a minute
    published = []
    publisher._on_cost = published.append
    counter = registry.classes()[Kind.COUNTER]("vllm:c", "doc")
    publisher.flush()
    publisher.start()
    try:
        counter.inc()
        publisher.changed()
        deadline = time.monotonic() + 10
        while value("vllm:c_total") != 1:
            assert time.monotonic() < deadline, "a change was not published"
            time.sleep(0.005)
        before, started = len(published), time.monotonic()
        while time.monotonic() - started < 0.5:  # a change every 1 ms, as vLLM's steps under load
            counter.inc()
            publisher.changed()
            time.sleep(0.001)
        publisher.changed()
        took = time.monotonic() - started
        while value("vllm:c_total") != counter._value.get():
            assert time.monotonic() < deadline, "the last change was not published"
            time.sleep(0.005)
        assert 1 <= len(published) - before <= took / MIN_GAP_S + 2, len(published) - before  # not 500
    finally:
        publisher.stop()


def test_publishes_after_a_quiet_spell_go_at_once_and_the_cpu_budget_bounds_the_rest():
    """A request's end asks twice (vLLM's record of its last step, then the backend's outcome); on a busy machine one
    publish took 5-8 ms of CPU, and a rest of 20 × that kept the outcome off /metrics for 0.1-0.15 s. The budget lets
    a few such publishes follow each other at MIN_GAP_S, then holds publishing to DUTY of a core."""
    from vllm_triton_observable.metrics.publisher import BURST_CPU_S, DUTY, MIN_GAP_S, PublishCost

    _, _, publisher, _ = setup(interval_s=1.0)
    publisher._cost = PublishCost(cpu_s=0.008)  # each publish as costly as on two loaded cores
    rests = [publisher.gap_s() for _ in range(4)]
    assert rests[:2] == [MIN_GAP_S, MIN_GAP_S]  # 20 ms of budget: two at once
    spent = 4 * 0.008 - BURST_CPU_S  # beyond the budget, minus what refilled in the microseconds between calls
    assert spent / DUTY - 0.01 < rests[3] <= spent / DUTY and rests[3] > rests[2]  # then it rests for the excess
    publisher._cost = PublishCost(cpu_s=1.0)  # a pathological publish: never more than the interval
    assert publisher.gap_s() == 1.0


def test_the_cost_of_each_publish_is_counted():
    registry, _, publisher, _ = setup()
    costs = []
    publisher._on_cost = costs.append
    registry.classes()[Kind.HISTOGRAM]("vllm:x_seconds", "doc", buckets=[0.1, 1.0]).observe(0.5)
    registry.classes()[Kind.GAUGE]("vllm:g", "doc").set(2)
    publisher.flush()
    assert costs[-1].calls == {"observe": 1, "increment": 1}  # a counter still at 0 is not sent
    assert costs[-1].wall_s > 0 and costs[-1].cpu_s >= 0


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
    publisher.flush()
    assert value(f"{names.VLLM_GENERATION_TOKENS}") == 0
    own_request[0] = False
    logger.record(None, stats)
    publisher.flush()
    assert value(f"{names.VLLM_GENERATION_TOKENS}") == 5 and not logged


def test_a_step_in_which_requests_finished_asks_for_a_publish():
    """Before the finished requests' final outputs reach anyone: a scrape right after the response finds them."""
    from vllm.v1.engine import FinishReason
    from vllm.v1.metrics.stats import FinishedRequestStats, IterationStats

    from vllm_triton_observable.metrics.catalogue import BASE_ENGINE, vllm_config
    from vllm_triton_observable.metrics.stat_logger import stat_logger_class

    registry, errors, _, logged = setup()
    asked = []
    logger = stat_logger_class(registry, errors, finished=lambda: asked.append(1))(vllm_config(BASE_ENGINE), [0])
    stats = IterationStats()
    stats.num_generation_tokens = 1
    logger.record(None, stats)
    assert asked == []  # a step like any other: the periodic publish sends it
    stats.finished_requests.append(FinishedRequestStats(FinishReason.LENGTH, e2e_latency=0.5,
                                                        num_prompt_tokens=3, num_generation_tokens=2))
    logger.record(scheduler_stats=None, iteration_stats=stats)
    assert asked == [1] and not logged


def test_the_registry_as_otlp_metrics_with_exemplars():
    from opentelemetry.sdk.metrics.export import AggregationTemporality
    from opentelemetry.sdk.resources import Resource

    from vllm_triton_observable.metrics.exemplars import ExemplarStore
    from vllm_triton_observable.metrics.otlp_metrics import metrics_data

    registry, _, publisher, _ = setup()
    classes = registry.classes()
    classes[Kind.COUNTER]("vllm:tokens", "doc", labelnames=["engine"]).labels("0").inc(7)
    classes[Kind.GAUGE]("vllm:running", "doc").set(3)
    histogram = classes[Kind.HISTOGRAM]("vllm:time_to_first_token_seconds", "doc", buckets=[0.1, 1.0])
    for v in (0.05, 0.5, 0.7, 5.0):
        histogram.observe(v)
    exemplars = ExemplarStore(registry.buckets)
    exemplars.request_finished((1, 2), object())  # no timings: nothing recorded, nothing raised
    exemplars.record("vllm:not_here", 0.1, trace_id=1, span_id=2)  # a family the registry lacks
    exemplars.record(names.VLLM_TTFT, 0.7, trace_id=0xABC, span_id=0xDEF)
    exemplars.record(names.VLLM_TTFT, 0.5, trace_id=0x123, span_id=0x456)  # the same bucket: the latest stays
    exemplars.record(names.VLLM_TTFT, 5.0, trace_id=0x789, span_id=0x101)
    data = metrics_data(registry.collect(), {"model": "m"}, Resource.create({}), exemplars, 1, 2)
    metrics = {m.name: m for m in data.resource_metrics[0].scope_metrics[0].metrics}
    (tokens,) = metrics["vllm:tokens_total"].data.data_points
    assert metrics["vllm:tokens_total"].data.is_monotonic and tokens.value == 7
    assert tokens.attributes == {"engine": "0", "model": "m"} and tokens.start_time_unix_nano > 1
    assert metrics["vllm:running"].data.data_points[0].value == 3
    ttft = metrics[names.VLLM_TTFT].data
    assert ttft.aggregation_temporality is AggregationTemporality.CUMULATIVE
    (point,) = ttft.data_points
    assert (point.count, point.bucket_counts, list(point.explicit_bounds)) == (4, [1, 2, 1], [0.1, 1.0])
    assert point.sum == pytest.approx(6.25)
    assert [(e.value, e.trace_id, e.span_id) for e in point.exemplars] == [(0.5, 0x123, 0x456), (5.0, 0x789, 0x101)]


def test_exemplar_values_are_vllms_own_timings_of_the_request():
    from types import SimpleNamespace

    from vllm_triton_observable.metrics.exemplars import request_values

    stats = SimpleNamespace(first_token_latency=0.25, arrival_time=100.0)
    assert request_values(stats, now=lambda: 101.5) == {names.VLLM_TTFT: 0.25, names.VLLM_E2E_LATENCY: 1.5}
    assert request_values(None) == {}  # vLLM handed out no timings (stats off)


def test_the_liveness_timestamp_reads_the_engine_activity_its_logger_writes():
    """One object says when the engine last made progress: its stat logger writes every step (the backend's own
    requests included), the progress family publishes it as Unix time (now while idle, the last step while busy),
    and the deprecated last-record name keeps the last step."""
    import time

    from vllm_triton_observable.common.engine_activity import EngineActivity
    from vllm_triton_observable.metrics.backend_families import BackendFamilies, BackendInfo

    clock = [1000.0]
    inflight = [0]
    activity = EngineActivity(lambda: clock[0])
    registry, _, publisher, _ = setup()
    families = BackendFamilies(registry, BackendInfo("0", "0", True, True), lambda: inflight[0], activity)

    def stamps() -> tuple[float, float]:
        families.refresh()
        values = exposition(registry)
        return values[(names.ENGINE_LAST_PROGRESS_TIMESTAMP, ())], values[(names.LAST_RECORD_TIMESTAMP, ())]

    progress, record = stamps()
    assert abs(progress - time.time()) < 1 and record == 0  # idle: progress is now; no step yet
    inflight[0] = 2
    stamps()  # the busy spell starts at 1000
    with activity.own_request():
        assert activity.serving_own_request
        clock[0] = 1010.0
        activity.stat_logger_class()(None).record(None, None)
    assert not activity.serving_own_request and activity.last_step == 1010.0
    clock[0] = 1100.0
    progress, record = stamps()
    assert abs(progress - (time.time() - 90)) < 1 and abs(record - progress) < 1e-3  # stalled 90 s
    activity.new_engine()
    assert activity.last_step is None
