"""The backend's own metrics path: recording vLLM's stats and publishing them to Triton."""

from __future__ import annotations

from dataclasses import dataclass

from alerts.definitions import INSTANCE, Alert, selector
from observability.config import Config, DashboardUID
from vllm_triton_observable.metrics import names


@dataclass(frozen=True)
class Thresholds:
    metrics_errors_for: str = "5m"


def alerts(config: Config) -> list[Alert]:
    t = config.thresholds(Thresholds())
    s = selector(config)  # the Triton targets, in every expression
    return [
        Alert(
            name="VllmMetricsErrors",
            expr=f"sum by ({INSTANCE}, {names.STAGE}) (increase({names.METRICS_ERRORS}{s}[10m])) > 0",
            for_=t.metrics_errors_for,
            severity="warning",
            summary="The backend's metrics path fails.",
            description=(
                "{{ $labels.model_instance }} had {{ $value | humanize }} metrics {{ $labels.stage }} errors in 10m."),
            meaning=(
                "vLLM's stat logger (stage record) or the publisher to Triton (stage publish) raised; the engine keeps "
                "serving, but some metric values are missing or stale."),
            check=(
                "The server log: the first error of each kind is logged with its traceback ('metrics record failed' "
                "or 'metrics publish failed')."),
            action="Report it with the log lines and the vLLM version; a family Triton refuses is named in the log.",
            dashboard=DashboardUID.HEALTH,
            panel="Metrics errors/s",
        ),
    ]
