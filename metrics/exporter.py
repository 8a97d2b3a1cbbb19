"""Metrics for one model instance: the gating decision, the registry, vLLM's logger class and the publisher."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..common.engine_activity import EngineActivity
from ..common.vocabulary import Outcome
from . import names
from .backend_families import INFO_HELP, BackendFamilies, BackendInfo
from .errors import MetricErrors
from .exemplars import ExemplarStore
from .exposition_file import exposition_path, write_exposition
from .otlp_metrics import OtlpMetricsExporter
from .publisher import PublishCost, TritonPublisher
from .registry import InstanceRegistry
from .series_lease import SeriesLease
from .stat_logger import stat_logger_class

PUBLISH_INTERVAL_S = 1.0


def gate(report_custom_metrics: bool, engine_config: dict[str, Any]) -> str | None:
    """None when metrics are on; else the reason they are off (compatible with the official backend)."""
    if not report_custom_metrics:
        return 'REPORT_CUSTOM_METRICS is not "true" in config.pbtxt'
    if str(engine_config.get("disable_log_stats", False)).lower() == "true":
        return "disable_log_stats is true in model.json (vLLM collects no stats)"
    return None


class MetricsExporter:
    def __init__(self, pb_utils: Any, labels: dict[str, str], log_error: Callable[[str], None],
                 activity: EngineActivity, per_token_histograms: str = "series", otlp: bool = False,
                 service_name: str = names.TRACE_SERVICE, lease: SeriesLease | None = None) -> None:
        """`labels`: Triton's model, version and model_instance, on every series; `activity`: the engine's (its
        last step, its own requests, which vLLM's families leave out); `service_name`: the OTLP metrics'
        resource, the backend's own spans' service; `lease`: held while this load publishes the labels' series
        to Triton (metrics.series_lease)."""
        self.registry = InstanceRegistry(labels)
        self._activity = activity
        self._as_series = names.PER_TOKEN_HISTOGRAMS if per_token_histograms == "series" else ()
        self._exposition = exposition_path(self.registry.constant_labels[names.MODEL_INSTANCE])
        # OTLP_METRICS: exemplars recorded by the generation service for traced requests, sent with the registry
        self.exemplars = ExemplarStore(self.registry.buckets) if otlp else None
        self._otlp: OtlpMetricsExporter | None = None
        self._service = service_name
        self.errors = MetricErrors(self.registry, log_error)
        self._pb = pb_utils
        self._lease = lease
        self._publisher: TritonPublisher | None = None
        self.families: BackendFamilies | None = None

    @staticmethod
    def triton_supports_metrics(pb_utils: Any) -> bool:
        """False for a Triton build without metrics support, which refuses a metric family. (Triton 2.51 still
        lets a stub create families when the server runs with --allow-metrics=false, so the plan reads the
        server's command line for that.)"""
        try:
            pb_utils.MetricFamily(name=names.INFO, description=INFO_HELP, kind=pb_utils.MetricFamily.GAUGE)
        except Exception as exc:
            if "metrics not supported" in str(exc).lower():
                return False
            raise
        return True

    def stat_loggers(self) -> list[type]:
        """vLLM's logger for this instance; it records nothing while the engine serves the backend's own request."""
        activity = self._activity
        return [stat_logger_class(self.registry, self.errors, lambda: activity.serving_own_request,
                                  finished=self._changed)]

    def _changed(self) -> None:
        """Publish soon: requests finished (vLLM recorded their last step, or the backend counted an outcome); the
        publisher coalesces. Other changes (a step's gauges and counters) wait for the periodic publish."""
        publisher = self._publisher
        if publisher is not None:
            publisher.changed()

    def start(self, info: BackendInfo, inflight_count: Callable[[], int],
              behind_seconds: Callable[[], float]) -> None:
        self.families = BackendFamilies(self.registry, info, inflight_count, self._activity, behind_seconds)
        self._publisher = TritonPublisher(self.registry, self._pb, self.errors, PUBLISH_INTERVAL_S,
                                          before_flush=self.families.refresh, as_series=self._as_series,
                                          on_cost=self._published, lease=self._lease)
        self._publisher.flush()  # every family is on /metrics by the time the model is READY
        self._publisher.start()
        if self.exemplars is not None:
            self._otlp = OtlpMetricsExporter(self.registry.collect, self.registry.constant_labels,
                                             {"service.name": self._service}, self.exemplars,
                                             on_export=self.families.otlp_exported)
            self._otlp.start()

    def _published(self, cost: PublishCost) -> None:
        if self.families is not None:
            self.families.published(cost)
        if self._exposition is not None:
            write_exposition(self.registry, self._exposition)

    def request_finished(self, outcome: Outcome) -> None:
        if self.families is not None:
            self.families.request_finished(outcome)
            self._changed()

    def executed(self, requests: int) -> None:
        """Triton's execute() handed over this many requests (on Triton's thread: one observe, lock-guarded)."""
        if self.families is not None:
            self.families.execute_batch.observe(requests)

    def spans_dropped(self, count: int) -> None:
        if self.families is not None:
            self.families.spans_dropped.inc(count)

    def stop(self) -> None:
        if self._otlp is not None:
            self._otlp.stop()
            self._otlp = None
        if self._publisher is not None:
            self._publisher.stop()
            self._publisher = None
