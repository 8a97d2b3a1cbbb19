"""Whether Prometheus sees the server and its vLLM metrics at all."""

from __future__ import annotations

from dataclasses import dataclass

from alerts.definitions import Alert, selector
from observability.config import Config, DashboardUID
from vllm_triton_observable.metrics import names


@dataclass(frozen=True)
class Thresholds:
    absent_for: str = "5m"
    target_down_for: str = "5m"


def alerts(config: Config) -> list[Alert]:
    t = config.thresholds(Thresholds())
    s = selector(config)  # the Triton targets, in every expression
    return [
        Alert(
            name="VllmMetricsAbsent",
            expr=(
                f"(up{s} == 1) unless on (job, instance) group by (job, instance) "
                f"({names.VLLM_RUNNING}{s})"),
            for_=t.absent_for,
            severity="warning",
            summary="A Triton target is up but exports no vLLM metrics.",
            description="{{ $labels.instance }} ({{ $labels.job }}) is scraped but has no vllm: series.",
            meaning=(
                "Triton answers but none of its models publishes vLLM's metrics, so dashboards and the other "
                "alerts are blind for this target."),
            check=(
                "config.pbtxt has REPORT_CUSTOM_METRICS \"true\"; model.json does not set disable_log_stats; the "
                "server does not run with --allow-metrics=false; Triton's log line `[vllm] metrics: off for …` "
                "names the switch that is off."),
            action=(
                "Turn the switch named in the log on and reload the model, or narrow triton_selector so this "
                "alert only watches vLLM servers."),
            dashboard=DashboardUID.OVERVIEW,
            panel="Requests/s",
        ),
        Alert(
            name="TritonTargetDown",
            expr=f"1 - up{s} > 0",
            for_=t.target_down_for,
            severity="critical",
            summary="A Triton metrics target is down.",
            description="Prometheus cannot scrape {{ $labels.instance }} ({{ $labels.job }}).",
            meaning="The Triton server is down, restarting, or its metrics port is unreachable.",
            check="The tritonserver process and its log; the metrics port (8002) and network policy.",
            action="Restart the server or fix the network path; check why it stopped (OOM, crash).",
            dashboard=DashboardUID.SERVER,
            panel="Triton successes vs vLLM finished requests",
        ),
    ]
