"""Latency SLOs: their recording rules (error ratios over the burn windows) and the multi-window burn-rate alerts."""

from __future__ import annotations

from dataclasses import dataclass

from alerts.definitions import FLEET, Alert, RecordingRule, enough_traffic, selector
from observability.config import Config, DashboardUID, LatencySLO
from observability.promql import le_matcher
from vllm_triton_observable.metrics.registry import triton_le_label


@dataclass(frozen=True)
class BurnWindow:
    severity: str
    long: str
    short: str
    factor: float
    for_: str


@dataclass(frozen=True)
class Thresholds:
    # Multi-window multi-burn-rate alerting (Google SRE workbook), for a 30-day objective. The objectives themselves
    # are Config.slos: the dashboards draw them too.
    burn_windows: tuple[BurnWindow, ...] = (
        BurnWindow("critical", "1h", "5m", 14.4, "2m"),
        BurnWindow("critical", "6h", "30m", 6, "15m"),
        BurnWindow("warning", "1d", "2h", 3, "1h"),
        BurnWindow("warning", "3d", "6h", 1, "3h"),
    )


SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def windows(thresholds: Thresholds) -> list[str]:
    """Every window a burn-rate alert reads, shortest first: each gets a recording rule per SLO."""
    found = {w for b in thresholds.burn_windows for w in (b.long, b.short)}
    return sorted(found, key=lambda w: float(w[:-1]) * SECONDS[w[-1]])


def slo_record(slo: LatencySLO, window: str) -> str:
    return f"job_model:vllm_triton_slo_{slo.name.lower()}_errors:ratio_rate{window}"


def recording_rules(config: Config) -> list[RecordingRule]:
    rules = []
    for slo in config.slos:
        le = le_matcher(triton_le_label(slo.threshold_s))
        good = f"{slo.histogram}_bucket{selector(config, le)}"
        total = f"{slo.histogram}_count{selector(config)}"
        for window in windows(config.thresholds(Thresholds())):
            rules.append(RecordingRule(slo_record(slo, window), (
                f"1 - (sum by ({FLEET}) (rate({good}[{window}])) / "
                f"(sum by ({FLEET}) (rate({total}[{window}])) > 0))")))
    return rules


def alerts(config: Config) -> list[Alert]:
    found = []
    for slo in config.slos:
        budget = 1 - slo.objective
        for window in config.thresholds(Thresholds()).burn_windows:
            found.append(Alert(
                name=f"Vllm{slo.name}ErrorBudgetBurn",
                expr=(
                    f"({slo_record(slo, window.long)} > ({window.factor:g} * {budget:g})) and "
                    f"({slo_record(slo, window.short)} > ({window.factor:g} * {budget:g})) and "
                    f"{enough_traffic(config, slo.histogram + '_count', window.long)}"),
                for_=window.for_,
                severity=window.severity,
                summary=f"A vLLM model burns its {slo.description} error budget too fast.",
                description=(
                    f"{{{{ $labels.model }}}} ({{{{ $labels.job }}}}, all replicas): "
                    f"{{{{ $value | humanizePercentage }}}} of requests over {window.long} exceed "
                    f"{slo.threshold_s:g} s {slo.description} (budget {budget:.2%}, burn rate > {window.factor:g})."),
                meaning=(
                    f"More than {window.factor:g}× the allowed share of requests ({budget:.2%}) miss the "
                    f"{slo.description} objective ({slo.objective:.2%} ≤ {slo.threshold_s:g} s over 30 days) in both "
                    f"the {window.long} and the {window.short} windows, counted over all replicas of the model (the "
                    f"targets of one scrape job) and only when they served at least {config.min_requests} requests "
                    f"in the {window.long} window."),
                check=(
                    "The latency dashboard's distributions and phase breakdown, then the `instance` variable to find "
                    "the replicas that burn (one slow replica, or all of them); queueing and KV-cache pressure; a "
                    "recent deploy or traffic change."),
                action="Shed or shift load, add capacity, or roll back; a slow burn (warning) can wait for working "
                       "hours.",
                dashboard=DashboardUID.OVERVIEW,
                panel=f"{slo.name} SLO attainment",
                extra_labels={"long_window": window.long, "short_window": window.short},
            ))
    return found
