"""What an alert and a recording rule are, and the PromQL pieces the alert groups (alerts.groups) share.

Each alert carries its runbook text (rendered into alerts/runbook.md) and the dashboard panel that shows it (by
title: alerts.build resolves it to the panel's id from the dashboards' definitions); the renderers turn the
composed list into Prometheus rule files, a Kubernetes PrometheusRule and Grafana-managed alert rules.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from observability.config import Config
from vllm_triton_observable.metrics import names

# Grouping labels: Prometheus' target labels, then the backend's. FLEET is a model over all its replicas (the
# targets of one scrape job): user-facing ratios and SLOs are judged there; per-replica faults per INSTANCE.
FLEET = f"job, {names.MODEL}"
MODEL = f"job, instance, {names.MODEL}"
INSTANCE = f"{MODEL}, {names.MODEL_INSTANCE}"
ENGINE = f"{INSTANCE}, {names.ENGINE}"


@dataclass(frozen=True)
class RecordingRule:
    record: str
    expr: str


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str  # a PromQL filter: the alert fires for every series it returns (values are > 0 when firing)
    for_: str
    severity: str
    summary: str  # no templating; a sentence
    description: str  # templated with $labels / $value
    dashboard: str  # dashboard uid
    panel: str  # panel title on that dashboard
    # Runbook text; a second severity of the same alert leaves them empty and shares the first one's.
    meaning: str = ""  # what it means
    check: str = ""  # what to check
    action: str = ""  # what to do
    extra_labels: dict[str, str] = field(default_factory=dict)

    @property
    def anchor(self) -> str:
        return self.name.lower()


def paging(warning: Alert, expr: str, for_: str) -> list[Alert]:
    """A warning and its critical variant: the same alert, summary, description and panel, a stricter expression
    or `for`; the runbook section is the warning's."""
    return [warning, dataclasses.replace(warning, expr=expr, for_=for_, severity="critical", meaning="", check="",
                                         action="")]


def selector(config: Config, extra: str = "") -> str:
    parts = [p for p in (config.triton_selector, extra) if p]
    return "{" + ", ".join(parts) + "}" if parts else ""


def enough_traffic(config: Config, counter: str, window: str, extra: str = "") -> str:
    """The minimum-traffic guard of a fleet ratio alert: at least `min_requests` in the window over all replicas."""
    return (f"on ({FLEET}) (sum by ({FLEET}) (increase({counter}{selector(config, extra)}[{window}])) >= "
            f"{config.min_requests})")
