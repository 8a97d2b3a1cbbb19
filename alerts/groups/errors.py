"""Requests that fail on the server's side, judged over all replicas of a model."""

from __future__ import annotations

from dataclasses import dataclass

from alerts.definitions import FLEET, Alert, enough_traffic, paging
from observability.config import Config, DashboardUID
from observability.promql import ANSWERED, TRITON_REFUSED, error_ratio
from vllm_triton_observable.metrics import names


@dataclass(frozen=True)
class Thresholds:
    """How long the error ratio stays over Config's error_ratio_warning / _critical (the overview draws those)."""

    error_ratio_warning_for: str = "10m"
    error_ratio_critical_for: str = "2m"


def alerts(config: Config) -> list[Alert]:
    t = config.thresholds(Thresholds())
    errors = error_ratio(config.triton_selector, FLEET, "5m")
    traffic = enough_traffic(config, names.REQUESTS_FINISHED, "5m", ANSWERED)
    return [
        *paging(Alert(
            name="VllmHighErrorRatio",
            expr=f"({errors} > {config.error_ratio_warning:g}) and {traffic}",
            for_=t.error_ratio_warning_for,
            severity="warning",
            summary="Many requests to a vLLM model fail.",
            description=(
                "{{ $value | humanizePercentage }} of requests to {{ $labels.model }} ({{ $labels.job }}, all "
                "replicas) failed over 5m."),
            meaning=(
                "Requests end with a server-side failure: the backend answered them with an error (engine dead or "
                f"unhealthy, generation failed, unloading: {names.REQUESTS_FINISHED} outcome failed) or Triton "
                f"refused them before the backend saw them (queue full or timed out: {names.TRITON_FAILURE} reason "
                f"{TRITON_REFUSED}). Bad input (outcome rejected) and client cancellations are not errors of the "
                "server and are not counted."),
            check=(
                f"Triton's log for `[vllm] generation failed` lines; {names.REQUESTS_FINISHED} by outcome; "
                "engine health."),
            action="Fix the cause in the log; if the engine is unhealthy, see VllmEngineUnhealthy.",
            dashboard=DashboardUID.OVERVIEW,
            panel="Error ratio",
        ), f"({errors} > {config.error_ratio_critical:g}) and {traffic}", t.error_ratio_critical_for),
    ]
