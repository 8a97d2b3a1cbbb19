"""Triton and vLLM side by side: Triton's own request, queue and CPU/GPU metrics next to the engine's."""

from __future__ import annotations

from grafana_foundation_sdk.builders.dashboard import Dashboard

from dashboards.config import Config
from dashboards.layout import dashboard, row
from dashboards.panels import graph
from dashboards.promql import TRITON, VLLM, ratio, sel, sum_rate

UID = "vllm-triton-server"
HOST = 'job=~"$job", instance=~"$instance"'


def per_request(duration_us: str) -> str:
    """Seconds per request from one of Triton's cumulative microsecond counters."""
    return ratio(sum_rate(duration_us, TRITON, "model"), sum_rate("nv_inference_request_success", TRITON, "model")
                 ) + " / 1e6"


def build(config: Config, slo_buckets: dict[str, tuple[float, ...]]) -> Dashboard:
    board = dashboard(UID, "vLLM on Triton / Triton and vLLM", "Triton's view of the same requests the engine "
                      "serves (generated).", config, slo_buckets)
    return (
        board.with_row(row("Requests"))
        .with_panel(graph("Triton successes vs vLLM finished requests", "Triton's successful requests next to "
                          "vLLM's finished requests: a gap means requests failing before or after the engine.",
                          "reqps", (sum_rate("nv_inference_request_success", TRITON, "model"), "triton {{model}}"),
                          (sum_rate("vllm:request_success_total", VLLM, "model"), "vllm {{model}}")))
        .with_panel(graph("Triton failures by reason", "nv_inference_request_failure per second by reason "
                          "(REJECTED, CANCELED, BACKEND, OTHER).", "reqps",
                          (sum_rate("nv_inference_request_failure", TRITON, "model, reason"),
                           "{{model}} {{reason}}")))
        .with_panel(graph("Pending in Triton vs in the engine", "Requests Triton holds (pending) next to the "
                          "engine's running and waiting requests and the backend's in-flight count.", "short",
                          (f"sum({sel('nv_inference_pending_request_count', TRITON)})", "triton pending"),
                          (f"sum({sel('vllm_triton_requests_in_flight', TRITON)})", "backend in flight"),
                          (f"sum({sel('vllm:num_requests_running', VLLM)})", "engine running"),
                          (f"sum({sel('vllm:num_requests_waiting', VLLM)})", "engine waiting")))
        .with_panel(graph("Triton time per request", "Triton's queue and compute time per request (seconds, "
                          "from its µs counters). For decoupled models compute covers only the execute() call; "
                          "use the vLLM latency panels for generation time.", "s",
                          (per_request("nv_inference_queue_duration_us"), "queue {{model}}"),
                          (per_request("nv_inference_compute_infer_duration_us"), "compute {{model}}")))
        .with_panel(graph("Requests by outcome (backend)", "Requests the backend finished, by outcome: completed, "
                          "cancelled by the client, rejected (bad input), failed.", "reqps",
                          (sum_rate("vllm_triton_requests_finished_total", TRITON, "outcome"), "{{outcome}}"),
                          span=24))
        .with_row(row("Host"))
        .with_panel(graph("CPU utilization", "Triton's host CPU utilization (0-1).", "percentunit",
                          (f"avg by (instance) ({sel('nv_cpu_utilization', HOST)})", "{{instance}}")))
        .with_panel(graph("CPU memory", "Host memory used by everything on the machine, and the total.", "bytes",
                          (f"sum by (instance) ({sel('nv_cpu_memory_used_bytes', HOST)})", "used {{instance}}"),
                          (f"sum by (instance) ({sel('nv_cpu_memory_total_bytes', HOST)})", "total {{instance}}")))
        .with_panel(graph("GPU utilization", "Triton's per-GPU utilization (GPU machines only).", "percentunit",
                          (f"avg by (instance, gpu_uuid) ({sel('nv_gpu_utilization', HOST)})",
                           "{{instance}} {{gpu_uuid}}")))
        .with_panel(graph("GPU memory", "Per-GPU memory used and total (GPU machines only).", "bytes",
                          (f"sum by (instance, gpu_uuid) ({sel('nv_gpu_memory_used_bytes', HOST)})", "used"),
                          (f"sum by (instance, gpu_uuid) ({sel('nv_gpu_memory_total_bytes', HOST)})", "total")))
    )
