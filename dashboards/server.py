"""Triton and vLLM side by side: Triton's own request, queue and CPU/GPU metrics next to the engine's."""

from __future__ import annotations

from grafana_foundation_sdk.builders.dashboard import Dashboard

from dashboards.layout import dashboard, row
from dashboards.panels import graph
from observability.config import Config, DashboardUID
from observability.promql import TRITON, VLLM, mean, ratio, sel, sum_rate
from vllm_triton_observable.metrics import names

UID = DashboardUID.SERVER
HOST = 'job=~"$job", instance=~"$instance"'


def per_request(*durations_us: str) -> str:
    """Seconds per request from Triton's cumulative microsecond counters (summed when several)."""
    total = " + ".join(sum_rate(d, TRITON, names.MODEL) for d in durations_us)
    return ratio(total, sum_rate(names.TRITON_SUCCESS, TRITON, names.MODEL)) + " / 1e6"


def build(config: Config, slo_buckets: dict[str, tuple[float, ...]]) -> Dashboard:
    board = dashboard(UID, "vLLM on Triton / Triton and vLLM", "Triton's view of the same requests the engine "
                      "serves (generated).", config, slo_buckets)
    return (
        board.with_row(row("Requests"))
        .with_panel(graph("Triton successes vs vLLM finished requests", "Triton's successful requests next to "
                          "vLLM's finished requests: a gap means requests failing before or after the engine.",
                          "reqps", (sum_rate(names.TRITON_SUCCESS, TRITON, names.MODEL), "triton {{model}}"),
                          (sum_rate(names.VLLM_REQUEST_SUCCESS, VLLM, names.MODEL), "vllm {{model}}")))
        .with_panel(graph("Triton failures by reason", f"{names.TRITON_FAILURE} per second by reason "
                          "(REJECTED, CANCELED, BACKEND, OTHER).", "reqps",
                          (sum_rate(names.TRITON_FAILURE, TRITON, f"{names.MODEL}, {names.REASON}"),
                           "{{model}} {{reason}}")))
        .with_panel(graph("Pending in Triton vs in the engine", "Requests Triton holds (pending) next to the "
                          "engine's running and waiting requests and the backend's in-flight count.", "short",
                          (f"sum({sel(names.TRITON_PENDING, TRITON)})", "triton pending"),
                          (f"sum({sel(names.REQUESTS_IN_FLIGHT, TRITON)})", "backend in flight"),
                          (f"sum({sel(names.VLLM_RUNNING, VLLM)})", "engine running"),
                          (f"sum({sel(names.VLLM_WAITING, VLLM)})", "engine waiting")))
        .with_panel(graph("Requests by outcome (backend)", "Requests the backend finished, by outcome: completed, "
                          "cancelled by the client, rejected (bad input), failed.", "reqps",
                          (sum_rate(names.REQUESTS_FINISHED, TRITON, names.OUTCOME), "{{outcome}}"),
                          span=12))
        .with_panel(graph("Requests per execute()", "Requests Triton handed the backend per execute() call, the "
                          "mean over the window: 1 unless batched admission is on (config.pbtxt max_batch_size > "
                          "0), when requests that arrive together are handed over together.", "short",
                          (mean(names.EXECUTE_BATCH_SIZE, TRITON, names.MODEL), "{{model}}"), span=12))
        .with_panel(graph("Response threads behind the engine", "The average number of each instance's response "
                          "threads that were behind the engine's output (their responses waited more than 10 ms "
                          "to be sent). Near config.pbtxt RESPONSE_THREADS the model's stub process is the limit: "
                          "tokens reach clients later than the engine made them.", "short",
                          (sum_rate(names.RESPONSE_THREADS_BEHIND, TRITON, f"{names.MODEL}, {names.MODEL_INSTANCE}"),
                           "{{model}} {{model_instance}}"), span=12))
        .with_row(row("Per model: ensembles and their steps"))
        .with_panel(graph("Requests per model", "Requests Triton answered per second for every model, an ensemble "
                          "and each of its steps (preprocessor, vLLM model, postprocessor) apart.", "reqps",
                          (sum_rate(names.TRITON_SUCCESS, TRITON, names.MODEL), "{{model}}"), span=8))
        .with_panel(graph("Queue time per request", "Seconds a request waited in Triton's queue before each "
                          "model ran it, per model (from Triton's µs counters).", "s",
                          (per_request(names.TRITON_QUEUE_DURATION), "{{model}}"), span=8))
        .with_panel(graph("Compute time per request", "Seconds each model spent on a request: input, execute "
                          "and output, per model (from Triton's µs counters). A decoupled vLLM model's compute "
                          "covers only its execute() call; the vLLM latency panels show generation time. An "
                          "ensemble's own row is the sum over its steps.", "s",
                          (per_request(names.TRITON_COMPUTE_INPUT_DURATION, names.TRITON_COMPUTE_INFER_DURATION,
                                       names.TRITON_COMPUTE_OUTPUT_DURATION), "{{model}}"), span=8))
        .with_row(row("Host"))
        .with_panel(graph("CPU utilization", "Triton's host CPU utilization (0-1).", "percentunit",
                          (f"avg by (instance) ({sel(names.TRITON_CPU_UTILIZATION, HOST)})", "{{instance}}")))
        .with_panel(graph("CPU memory", "Host memory used by everything on the machine, and the total.", "bytes",
                          (f"sum by (instance) ({sel(names.TRITON_CPU_MEMORY_USED, HOST)})", "used {{instance}}"),
                          (f"sum by (instance) ({sel(names.TRITON_CPU_MEMORY_TOTAL, HOST)})", "total {{instance}}")))
        .with_panel(graph("GPU utilization", "Triton's per-GPU utilization (GPU machines only).", "percentunit",
                          (f"avg by (instance, gpu_uuid) ({sel(names.TRITON_GPU_UTILIZATION, HOST)})",
                           "{{instance}} {{gpu_uuid}}")))
        .with_panel(graph("GPU memory", "Per-GPU memory used and total (GPU machines only).", "bytes",
                          (f"sum by (instance, gpu_uuid) ({sel(names.TRITON_GPU_MEMORY_USED, HOST)})", "used"),
                          (f"sum by (instance, gpu_uuid) ({sel(names.TRITON_GPU_MEMORY_TOTAL, HOST)})", "total")))
    )
