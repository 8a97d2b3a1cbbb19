"""The engine's health: unhealthy, restarted again and again, or making no progress."""

from __future__ import annotations

from dataclasses import dataclass

from alerts.definitions import INSTANCE, Alert, selector
from observability.config import Config, DashboardUID
from observability.promql import age
from vllm_triton_observable.metrics import names


@dataclass(frozen=True)
class Thresholds:
    stall_seconds: float = 120.0  # requests in flight and no engine progress for this long
    stall_for: str = "1m"
    unhealthy_for: str = "1m"
    # With HEALTH_RECOVERY=restart an engine is healthy again within `unhealthy_for`: restarts are what page then.
    crash_loop_restarts: int = 3  # engine restarts within crash_loop_window
    crash_loop_window: str = "1h"


def alerts(config: Config) -> list[Alert]:
    t = config.thresholds(Thresholds())
    s = selector(config)  # the Triton targets, in every expression
    stall = f"{t.stall_seconds:g}"
    no_progress = age(names.ENGINE_LAST_PROGRESS_TIMESTAMP, config.triton_selector, INSTANCE)
    return [
        Alert(
            name="VllmEngineUnhealthy",
            expr=f"1 - max by ({INSTANCE}) ({names.ENGINE_HEALTHY}{s}) > 0",
            for_=t.unhealthy_for,
            severity="critical",
            summary="A vLLM engine is unhealthy and its model refuses requests.",
            description=(
                "Engine of {{ $labels.model_instance }} ({{ $labels.model }}) on {{ $labels.instance }} has been "
                "unhealthy for " + t.unhealthy_for + ": requests fail with UNAVAILABLE."),
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
            expr=(f"sum by ({INSTANCE}) (increase({names.ENGINE_RESTARTS}{s}[{t.crash_loop_window}])) "
                  f">= {t.crash_loop_restarts}"),
            for_="0m",
            severity="critical",
            summary="A vLLM engine keeps being replaced.",
            description=(
                "The engine of {{ $labels.model_instance }} ({{ $labels.model }}) on {{ $labels.instance }} was "
                "restarted {{ $value }} times within " + t.crash_loop_window + "."),
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
            # The age comes from a published Unix timestamp: a wedged stub stops publishing, Triton keeps
            # exporting its last values, and the age grows. An engine being restarted (healthy 0) is
            # VllmEngineUnhealthy's; `unless` keeps the rule working where the health monitor is off.
            expr=(f"({no_progress} > {stall}) unless on ({INSTANCE}) "
                  f"(max by ({INSTANCE}) ({names.ENGINE_HEALTHY}{s}) == 0)"),
            for_=t.stall_for,
            severity="critical",
            summary="A vLLM engine, or the backend serving it, makes no progress.",
            description=(
                "{{ $labels.model_instance }} on {{ $labels.instance }} has made no progress for {{ $value | "
                "humanizeDuration }}: no engine step with requests in flight, or no report from the backend at all."),
            meaning=(
                "Requests are accepted but the engine does not step — a hang (deadlock, stuck collective, stopped "
                "process) that vLLM's own dead-engine check does not see — or the backend's Python stub itself is "
                "wedged and has stopped publishing (its last values stay on /metrics; their timestamps give it "
                "away). The age is computed by Prometheus from the published timestamp "
                f"({names.ENGINE_LAST_PROGRESS_TIMESTAMP}, the measure of the health monitor's stall watchdog), so "
                "it cannot freeze at a healthy value. It works with the health monitor off too."),
            check=(
                "Whether the health monitor is on (ENABLE_VLLM_HEALTH_CHECK) and what it logged; py-spy dump of the "
                "EngineCore and worker processes and of the model's triton_python_backend_stub; GPU state."),
            action=(
                "Turn the health monitor on so hung engines are restarted automatically; otherwise restart the "
                "model or the server, and capture stacks before you do."),
            dashboard=DashboardUID.HEALTH,
            panel="Seconds since engine progress",
        ),
    ]
