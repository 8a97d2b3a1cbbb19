"""Every alert and recording rule, defined once from `observability.config.Config`.

Each alert carries its runbook text (rendered into alerts/runbook.md) and the dashboard panel that shows it;
the renderers turn the same list into Prometheus rule files, a Kubernetes PrometheusRule and Grafana-managed
alert rules.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

from observability.config import Config, DashboardUID, LatencySLO
from observability.promql import ANSWERED, TRITON_REFUSED, age, error_ratio, le_matcher
from vllm_triton_observable.metrics import names
from vllm_triton_observable.metrics.registry import triton_le_label

# Grouping labels: Prometheus' target labels, then the backend's. FLEET is a model over all its replicas (the
# targets of one scrape job): user-facing ratios and SLOs are judged there; per-replica faults per INSTANCE.
FLEET = f"job, {names.MODEL}"
MODEL = f"job, instance, {names.MODEL}"
INSTANCE = f"{MODEL}, {names.MODEL_INSTANCE}"
ENGINE = f"{INSTANCE}, {names.ENGINE}"
SLO_WINDOWS = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")


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


def slo_record(slo: LatencySLO, window: str) -> str:
    return f"job_model:vllm_triton_slo_{slo.name.lower()}_errors:ratio_rate{window}"


def enough_traffic(config: Config, counter: str, window: str, extra: str = "") -> str:
    """The minimum-traffic guard of a fleet ratio alert: at least `min_requests` in the window over all replicas."""
    return (f"on ({FLEET}) (sum by ({FLEET}) (increase({counter}{selector(config, extra)}[{window}])) >= "
            f"{config.min_requests})")


def recording_rules(config: Config) -> list[RecordingRule]:
    rules = []
    for slo in config.slos:
        le = le_matcher(triton_le_label(slo.threshold_s))
        good = f"{slo.histogram}_bucket{selector(config, le)}"
        total = f"{slo.histogram}_count{selector(config)}"
        for window in SLO_WINDOWS:
            rules.append(RecordingRule(slo_record(slo, window), (
                f"1 - (sum by ({FLEET}) (rate({good}[{window}])) / "
                f"(sum by ({FLEET}) (rate({total}[{window}])) > 0))")))
    return rules


def alerts(config: Config) -> list[Alert]:
    s = lambda extra="": selector(config, extra)  # noqa: E731
    kv = f"max by ({ENGINE}) ({names.VLLM_KV_CACHE_USAGE}{s()})"
    stall = f"{config.stall_seconds:g}"
    no_record = age(names.LAST_RECORD_TIMESTAMP, config.triton_selector, INSTANCE)
    no_progress = age(names.ENGINE_LAST_PROGRESS_TIMESTAMP, config.triton_selector, INSTANCE)
    waiting = f"sum by ({INSTANCE}) ({names.VLLM_WAITING}{s()})"
    preemptions = f"sum by ({INSTANCE}) (rate({names.VLLM_PREEMPTIONS}{s()}[5m]))"
    errors = error_ratio(config.triton_selector, FLEET, "5m")
    traffic = enough_traffic(config, names.REQUESTS_FINISHED, "5m", ANSWERED)
    found = [
        Alert(
            name="VllmEngineUnhealthy",
            expr=f"1 - max by ({INSTANCE}) ({names.ENGINE_HEALTHY}{s()}) > 0",
            for_=config.unhealthy_for,
            severity="critical",
            summary="A vLLM engine is unhealthy and its model refuses requests.",
            description=(
                "Engine of {{ $labels.model_instance }} ({{ $labels.model }}) on {{ $labels.instance }} has been "
                "unhealthy for " + config.unhealthy_for + ": requests fail with UNAVAILABLE."),
            meaning=(
                "The health monitor found the engine dead, hung (no progress with requests in flight for "
                "HEALTH_STALL_TIMEOUT_S) or, while idle, not answering its probes. Requests to this model instance "
                "fail fast until it recovers."),
            check=(
                "Triton's log for `[vllm] engine health:` lines (they give the cause); "
                f"{names.ENGINE_RESTARTS}; the EngineCore and worker processes (`ps -ef | grep VLLM`); "
                "host memory and the GPU (OOM kills, Xid errors)."),
            action=(
                "With HEALTH_RECOVERY=restart the engine is replaced automatically; if restarts keep failing, "
                "reload the model (explicit mode) or restart the server, and fix the cause in the log."),
            dashboard=DashboardUID.HEALTH,
            panel="Engine healthy",
        ),
        Alert(
            name="VllmEngineCrashLoop",
            expr=(f"sum by ({INSTANCE}) (increase({names.ENGINE_RESTARTS}{s()}[{config.crash_loop_window}])) "
                  f">= {config.crash_loop_restarts}"),
            for_="0m",
            severity="critical",
            summary="A vLLM engine keeps being replaced.",
            description=(
                "The engine of {{ $labels.model_instance }} ({{ $labels.model }}) on {{ $labels.instance }} was "
                "restarted {{ $value }} times within " + config.crash_loop_window + "."),
            meaning=(
                "The health monitor keeps recovering the engine (HEALTH_RECOVERY=restart), and something keeps "
                "killing or hanging it again. Each restart fails the requests in flight and refuses new ones for "
                "the tens of seconds a new engine takes, yet VllmEngineUnhealthy may never fire: the engine is "
                "healthy again within its `for`."),
            check=(
                "Triton's log for `[vllm] engine health:` and `restarting the engine` lines (the cause of each "
                "restart); the kernel log for OOM kills (`dmesg`), host and GPU memory, GPU Xid errors; whether the "
                "restarts follow a kind of request (very long prompts, a LoRA adapter)."),
            action=(
                "Fix the cause: more memory (lower gpu_memory_utilization, max_model_len or max_num_seqs), a healthy "
                "GPU, or the request pattern that crashes the engine. HEALTH_RESTART_MAX_ATTEMPTS bounds the attempts "
                "for one failure, not the restarts over time."),
            dashboard=DashboardUID.HEALTH,
            panel="Engine restarts per hour",
        ),
        Alert(
            name="VllmEngineStalled",
            # Ages come from published Unix timestamps: a wedged stub stops publishing, Triton keeps exporting
            # its last values, and the age grows. While the monitor restarts an engine (healthy 0) it does not
            # publish either: VllmEngineUnhealthy covers that time.
            expr=(
                f"((max by ({INSTANCE}) ({names.REQUESTS_IN_FLIGHT}{s()}) > 0) and on ({INSTANCE}) "
                f"({no_record} > {stall})) or "
                f"(({no_progress} > {stall}) and on ({INSTANCE}) "
                f"(max by ({INSTANCE}) ({names.ENGINE_HEALTHY}{s()}) == 1))"),
            for_=config.stall_for,
            severity="critical",
            summary="A vLLM engine, or the backend serving it, makes no progress.",
            description=(
                "{{ $labels.model_instance }} on {{ $labels.instance }} has made no progress for {{ $value | "
                "humanizeDuration }}: no engine step with requests in flight, or no report from the backend at all."),
            meaning=(
                "Requests are accepted but the engine does not step — a hang (deadlock, stuck collective, stopped "
                "process) that vLLM's own dead-engine check does not see — or the backend's Python stub itself is "
                "wedged and has stopped publishing (its last values stay on /metrics; their timestamps give it "
                "away). Ages are computed by Prometheus from the published timestamps "
                f"({names.LAST_RECORD_TIMESTAMP}, {names.ENGINE_LAST_PROGRESS_TIMESTAMP}), so they cannot freeze "
                "at a healthy value."),
            check=(
                "Whether the health monitor is on (ENABLE_VLLM_HEALTH_CHECK) and what it logged; py-spy dump of the "
                "EngineCore and worker processes and of the model's triton_python_backend_stub; GPU state."),
            action=(
                "Turn the health monitor on so hung engines are restarted automatically; otherwise restart the "
                "model or the server, and capture stacks before you do."),
            dashboard=DashboardUID.HEALTH,
            panel="Seconds since engine progress",
        ),
        Alert(
            name="VllmMetricsAbsent",
            expr=(
                f"(up{s()} == 1) unless on (job, instance) group by (job, instance) "
                f"({names.VLLM_RUNNING}{s()})"),
            for_=config.absent_for,
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
            expr=f"1 - up{s()} > 0",
            for_=config.target_down_for,
            severity="critical",
            summary="A Triton metrics target is down.",
            description="Prometheus cannot scrape {{ $labels.instance }} ({{ $labels.job }}).",
            meaning="The Triton server is down, restarting, or its metrics port is unreachable.",
            check="The tritonserver process and its log; the metrics port (8002) and network policy.",
            action="Restart the server or fix the network path; check why it stopped (OOM, crash).",
            dashboard=DashboardUID.SERVER,
            panel="Triton successes vs vLLM finished requests",
        ),
        *paging(Alert(
            name="VllmHighErrorRatio",
            expr=f"({errors} > {config.error_ratio_warning:g}) and {traffic}",
            for_=config.error_ratio_warning_for,
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
        ), f"({errors} > {config.error_ratio_critical:g}) and {traffic}", config.error_ratio_critical_for),
        Alert(
            name="VllmKVCacheHigh",
            expr=f"{kv} > {config.kv_cache_warning:g}",
            for_=config.kv_cache_warning_for,
            severity="warning",
            summary="A vLLM engine's KV cache is nearly full.",
            description=(
                "KV cache of {{ $labels.model_instance }} engine {{ $labels.engine }} is "
                "{{ $value | humanizePercentage }} full."),
            meaning=(
                "Running requests hold almost all KV-cache blocks. A warning, never a page: vLLM is built to fill "
                "its KV cache (the more sequences it batches, the higher the throughput), so a healthy server under "
                "load sits here. Users feel it only when requests queue (VllmRequestsQueueing: time to first token "
                "grows) or running ones are preempted and recomputed (VllmHighPreemptionRate); those page."),
            check=f"{names.VLLM_WAITING}, preemptions, prompt and generation lengths, prefix-cache hit ratio.",
            action=(
                "Capacity planning, not an emergency: add capacity (instances, GPU memory via "
                "gpu_memory_utilization), lower max_num_seqs or max_model_len, or raise the prefix-cache hit ratio."),
            dashboard=DashboardUID.SATURATION,
            panel="KV-cache usage (max and mean)",
        ),
        *paging(Alert(
            name="VllmRequestsQueueing",
            expr=f"{waiting} > {config.waiting_requests_warning:g}",
            for_=config.waiting_requests_for,
            severity="warning",
            summary="Requests are queueing in a vLLM engine.",
            description="{{ $value }} requests wait in {{ $labels.model_instance }} on {{ $labels.instance }}.",
            meaning="The engine cannot admit requests as fast as they arrive; time to first token grows.",
            check=f"KV-cache usage, {names.VLLM_WAITING_BY_REASON}, the request rate.",
            action="Scale out (more instances or replicas), or reduce prompt/generation lengths.",
            dashboard=DashboardUID.SATURATION,
            panel="Waiting requests by reason",
        ), f"{waiting} > {config.waiting_requests_critical:g}", config.waiting_requests_critical_for),
        *paging(Alert(
            name="VllmHighPreemptionRate",
            expr=f"{preemptions} > {config.preemptions_per_s_warning:g}",
            for_=config.preemptions_for,
            severity="warning",
            summary="A vLLM engine preempts requests often.",
            description="{{ $labels.model_instance }} preempts {{ $value | humanize }} requests/s.",
            meaning=(
                "The KV cache runs out during generation and the scheduler evicts running requests, which must "
                "recompute: throughput drops and latency grows."),
            check="KV-cache usage, batch size (tokens per step), generation lengths.",
            action="Give the engine more KV cache or admit fewer concurrent sequences (max_num_seqs).",
            dashboard=DashboardUID.SATURATION,
            panel="Preemptions/s",
        ), f"{preemptions} > {config.preemptions_per_s_critical:g}", config.preemptions_critical_for),
        Alert(
            name="VllmMetricsErrors",
            expr=f"sum by ({INSTANCE}, {names.STAGE}) (increase({names.METRICS_ERRORS}{s()}[10m])) > 0",
            for_=config.metrics_errors_for,
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
    for slo in config.slos:
        budget = 1 - slo.objective
        for window in config.burn_windows:
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


def panel_ids(generated: Path) -> dict[tuple[str, str], int]:
    """(dashboard uid, panel title) → panel id, from the generated dashboards."""
    ids = {}
    for path in generated.glob("*.json"):
        board = json.loads(path.read_text())
        for panel in board["panels"]:
            ids[(board["uid"], panel["title"])] = panel["id"]
    return ids
