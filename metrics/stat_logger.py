"""vLLM's own `PrometheusStatLogger`, with its metric classes bound to the instance's private registry.

This is vLLM's documented extension point (its `ray_wrappers.py` swaps the same class attributes for Ray):
every family vLLM defines for the running version and configuration — including the speculative-decoding,
KV-connector and perf helpers' families — is created through these classes, so a new vLLM version's
families appear without code changes, with vLLM's names, labels and buckets.

Every call vLLM makes into the logger is guarded: vLLM runs `record()` inside its output handler, where an
exception would mark the engine dead. While `paused()` says so (a request of the backend's own — the warm-up of
a new engine, the check that an unhealthy one generates again — with no client request beside it) records are
left out: no client sent that request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..common.vllm_compat import PROMETHEUS_HELPER_ATTRIBUTES, STAT_LOGGER_CALLS
from .errors import MetricErrors
from .registry import InstanceRegistry, Kind


def _metric_attributes(classes: dict[Kind, type]) -> dict[str, type]:
    return {"_gauge_cls": classes[Kind.GAUGE], "_counter_cls": classes[Kind.COUNTER],
            "_histogram_cls": classes[Kind.HISTOGRAM]}


def _finished_requests(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether a record() call (scheduler_stats, iteration_stats, …) carries requests that finished in that step."""
    iteration = kwargs.get("iteration_stats", args[1] if len(args) > 1 else None)
    return bool(getattr(iteration, "finished_requests", None))


def _guarded(base: type, method: str, registry: InstanceRegistry, errors: MetricErrors | None,
             paused: Callable[[], bool], finished: Callable[[], None]) -> Any:
    original = getattr(base, method)

    def call(self: Any, *args: Any, **kwargs: Any) -> None:
        if method == "record" and paused():
            return
        try:
            original(self, *args, **kwargs)
            if method == "record" and _finished_requests(args, kwargs):
                finished()
        except Exception as exc:
            if errors is None:
                raise
            errors.report("record", exc)

    call.__name__ = method
    return call


def stat_logger_class(registry: InstanceRegistry, errors: MetricErrors | None = None,
                      paused: Callable[[], bool] = lambda: False,
                      finished: Callable[[], None] = lambda: None) -> type:
    """A PrometheusStatLogger subclass writing into `registry`; vLLM instantiates it (it is a factory by type).
    `finished()` is called after a record of a step in which requests finished — in vLLM's output handler, before
    their final outputs reach anyone — so it runs on vLLM's event loop and must not wait.

    Being a PrometheusStatLogger subclass also tells vLLM not to add its own Prometheus logger.
    """
    from vllm.v1.metrics.loggers import PrometheusStatLogger

    metric_classes = _metric_attributes(registry.classes())
    attributes: dict[str, Any] = dict(metric_classes)
    for helper in PROMETHEUS_HELPER_ATTRIBUTES:
        base = getattr(PrometheusStatLogger, helper, None)
        if base is not None:
            attributes[helper] = type(base.__name__, (base,), dict(metric_classes))
    for method in STAT_LOGGER_CALLS:
        if hasattr(PrometheusStatLogger, method):
            attributes[method] = _guarded(PrometheusStatLogger, method, registry, errors, paused, finished)
    return type("TritonStatLogger", (PrometheusStatLogger,), attributes)
