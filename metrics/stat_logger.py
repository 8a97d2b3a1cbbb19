"""vLLM's own `PrometheusStatLogger`, with its metric classes swapped for in-memory ones.

This is vLLM's documented extension point (its `ray_wrappers.py` swaps the same class attributes for Ray):
every family vLLM defines for the running version and configuration — including the speculative-decoding,
KV-connector and perf helpers' families — is created through these classes, so a new vLLM version's
families appear without code changes, with vLLM's names, labels and buckets.
"""

from __future__ import annotations

import time
from typing import Any

from metrics.local import Kind, MetricStore, bound_classes

# PrometheusStatLogger attributes naming helper classes that create metrics with their own class attributes.
_HELPER_ATTRIBUTES = ("_spec_decoding_cls", "_kv_connector_cls", "_ec_connector_cls", "_perf_metrics_cls")


def _metric_attributes(classes: dict[Kind, type]) -> dict[str, type]:
    return {"_gauge_cls": classes[Kind.GAUGE], "_counter_cls": classes[Kind.COUNTER],
            "_histogram_cls": classes[Kind.HISTOGRAM]}


def stat_logger_class(store: MetricStore, constant_labels: dict[str, str]) -> type:
    """A PrometheusStatLogger subclass writing into `store`; vLLM instantiates it (it is a factory by type).

    Being a PrometheusStatLogger subclass also tells vLLM not to add its own Prometheus logger.
    """
    from vllm.v1.metrics.loggers import PrometheusStatLogger

    metric_classes = _metric_attributes(bound_classes(store, constant_labels))
    attributes: dict[str, Any] = dict(metric_classes)
    for helper in _HELPER_ATTRIBUTES:
        base = getattr(PrometheusStatLogger, helper, None)
        if base is not None:
            attributes[helper] = type(base.__name__, (base,), dict(metric_classes))

    def record(self: Any, *args: Any, **kwargs: Any) -> None:
        store.last_record = time.monotonic()
        PrometheusStatLogger.record(self, *args, **kwargs)

    attributes["record"] = record
    return type("TritonStatLogger", (PrometheusStatLogger,), attributes)
