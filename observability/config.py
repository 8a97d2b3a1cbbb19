"""One config of selectors, thresholds and SLOs feeding the dashboards, the alert rules and the runbook.

Like kubernetes-mixin's `_config`: change a value here (or in a copy passed to the builders) and regenerate with
`make generate`; nothing else repeats these numbers. What dashboards and alerts share is a field here (the
selector, the SLOs, the thresholds a dashboard draws as well). What only one alert group reads, that group declares
itself, as a frozen `Thresholds` dataclass in its module under alerts/groups/ — as a mixin's alert file adds its
own `_config+::` defaults — and a copy given in `group_thresholds` replaces its defaults.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from vllm_triton_observable.metrics import names

T = TypeVar("T")

# vLLM 0.32's buckets for the SLO histograms, written here so that `make dashboards` and `make alerts` need no
# engine; tests/integration/test_dashboards.py fails when the installed vLLM's differ.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)
INTER_TOKEN_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                       20.0, 40.0, 80.0)
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                           240.0, 480.0, 960.0, 1920.0, 7680.0)


class DashboardUID:
    """The dashboards are built under these uids; alerts link to their panels by them."""

    OVERVIEW = "vllm-triton-overview"
    LATENCY = "vllm-triton-latency"
    SATURATION = "vllm-triton-saturation"
    SERVER = "vllm-triton-server"
    HEALTH = "vllm-triton-health"


@dataclass(frozen=True)
class LatencySLO:
    """`objective` of requests must be at or under `threshold_s`, which must be one of the histogram's buckets."""

    name: str  # TTFT, InterToken, EndToEnd
    histogram: str
    threshold_s: float
    buckets: tuple[float, ...]  # vLLM's buckets of `histogram` (a test keeps them equal to the installed vLLM's)
    objective: float = 0.99
    description: str = ""


@dataclass(frozen=True)
class Config:
    # Prometheus selector of the Triton targets, in every alert and recording rule and in the dashboards' `job`
    # variable. The default matches scrape jobs whose name contains "triton" (e.g. `triton`, or a Kubernetes
    # `default/triton-inference-server`), so rules loaded into a shared Prometheus never fire for node-exporter
    # or any other target; set it to your own job's selector (e.g. 'job="my-llm"') if its name differs.
    triton_selector: str = 'job=~".*triton.*"'

    # Thresholds the dashboards draw as well as the alerts fire on (alerts/groups/saturation.py, errors.py).
    # A full KV cache is how vLLM runs under load: it warns at most. Queueing and preemptions, which users feel,
    # are the paging signals (alerts/runbook.md, VllmKVCacheHigh).
    kv_cache_warning: float = 0.90
    error_ratio_warning: float = 0.01
    error_ratio_critical: float = 0.05
    # A ratio alert (error ratio, SLO burn; two groups) needs this many requests in its window, summed over the
    # replicas of a model: one slow or failed request on an idle model is not a burning budget.
    min_requests: int = 20

    slos: tuple[LatencySLO, ...] = (
        LatencySLO("TTFT", names.VLLM_TTFT, 2.5, TTFT_BUCKETS,
                   description="time to first token"),
        LatencySLO("InterToken", names.VLLM_INTER_TOKEN_LATENCY, 0.2, INTER_TOKEN_BUCKETS,
                   description="inter-token latency"),
        LatencySLO("EndToEnd", names.VLLM_E2E_LATENCY, 60.0, REQUEST_LATENCY_BUCKETS,
                   description="end-to-end request latency"),
    )
    # Replacements for alert groups' own thresholds: e.g. `(engine_health.Thresholds(stall_seconds=60),)`.
    group_thresholds: tuple[object, ...] = ()
    # Absolute links, because alerts are read in Alertmanager, Slack or PagerDuty, where a relative link is dead.
    # The defaults are placeholders on a reserved domain: set them to where your copy of alerts/runbook.md is
    # browsable and to your Grafana's dashboard path, then `make alerts`.
    runbook_base: str = "https://runbooks.REPLACE-ME.example/vllm-triton/runbook.md"
    grafana_base: str = "https://grafana.REPLACE-ME.example/d"

    # Kubernetes wiring (deploy/kubernetes, `make kubernetes`). The Service's name becomes the scrape job's name
    # (the Prometheus operator's default), which triton_selector above must match.
    service_name: str = "triton-inference-server"
    pod_labels: tuple[tuple[str, str], ...] = (("app.kubernetes.io/name", "triton-inference-server"),)
    # What a Prometheus operator's ruleSelector / serviceMonitorSelector and Grafana's dashboard sidecar look for.
    prometheus_rule_labels: tuple[tuple[str, str], ...] = (("prometheus", "k8s"), ("role", "alert-rules"))
    service_monitor_labels: tuple[tuple[str, str], ...] = (("prometheus", "k8s"),)
    grafana_dashboard_label: tuple[str, str] = ("grafana_dashboard", "1")
    scrape_interval: str = "15s"

    def thresholds(self, defaults: T) -> T:
        """An alert group's thresholds: the copy of their class in `group_thresholds`, else the group's defaults."""
        return next((t for t in self.group_thresholds if type(t) is type(defaults)), defaults)


DEFAULT = Config()
