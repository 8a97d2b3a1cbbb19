"""Every metric and label name that code, dashboards, alerts, the runbook and tests refer to — spelled once.

The backend's own families are defined from these constants. vLLM's and Triton's families are theirs: each vLLM
name here is checked against the catalogue derived from the installed vLLM, each Triton name against a real
server's /metrics (tests/integration/test_dashboards.py). Counters are spelled as exposed (`_total`);
histograms by their family name (`_bucket`, `_sum` and `_count` are appended where a query needs them).
"""

from __future__ import annotations

# -- the backend's own families ------------------------------------------------------------------------------------
INFO = "vllm_triton_info"
REQUESTS_IN_FLIGHT = "vllm_triton_requests_in_flight"
REQUESTS_FINISHED = "vllm_triton_requests_finished_total"
METRICS_ERRORS = "vllm_triton_metrics_errors_total"
# What publishing to Triton costs: calls by operation, and the publisher thread's time (metrics.publisher).
METRICS_PUBLISHES = "vllm_triton_metrics_publishes_total"
METRICS_PUBLISH_CALLS = "vllm_triton_metrics_publish_calls_total"
METRICS_PUBLISH_WALL = "vllm_triton_metrics_publish_wall_seconds_total"
METRICS_PUBLISH_CPU = "vllm_triton_metrics_publish_cpu_seconds_total"
# OTLP_METRICS: exports of the registry over OTLP/HTTP (metrics.otlp_metrics), and those that failed.
OTLP_METRIC_EXPORTS = "vllm_triton_otlp_metric_exports_total"
OTLP_METRIC_EXPORTS_FAILED = "vllm_triton_otlp_metric_exports_failed_total"
# Liveness as Unix timestamps: ages are computed in PromQL with time(), so a wedged stub (whose last published
# values Triton keeps exporting) shows as stale instead of frozen at a healthy age.
LAST_RECORD_TIMESTAMP = "vllm_triton_metrics_last_record_timestamp_seconds"
ENGINE_HEALTHY = "vllm_triton_engine_healthy"
ENGINE_HEALTH_STATE = "vllm_triton_engine_health_state"
ENGINE_PROBE_LATENCY = "vllm_triton_engine_probe_latency_seconds"
ENGINE_PROBE_FAILURES = "vllm_triton_engine_probe_consecutive_failures"
ENGINE_LAST_PROGRESS_TIMESTAMP = "vllm_triton_engine_last_progress_timestamp_seconds"
ENGINE_RESTARTS = "vllm_triton_engine_restarts_total"
TRACE_SPANS_DROPPED = "vllm_triton_trace_spans_dropped_total"
# Requests Triton handed over per execute() call: always 1 unless batched admission is on (max_batch_size > 0)
EXECUTE_BATCH_SIZE = "vllm_triton_execute_batch_size"
# Thread-seconds the response threads were behind the engine (backend.lanes_behind): the stub's saturation signal
RESPONSE_THREADS_BEHIND = "vllm_triton_response_threads_behind_seconds_total"

# -- tracing: the backend's OpenTelemetry service and the span attribute dashboards search by ---------------------
TRACE_SERVICE = "vllm-triton-backend"  # unless OTEL_SERVICE_NAME says otherwise
TRACE_MODEL_ATTRIBUTE = "triton.model_name"
TRACE_MODEL_VERSION_ATTRIBUTE = "triton.model_version"

# -- vLLM's families (as vLLM exposes them) -------------------------------------------------------------------------
VLLM_REQUEST_SUCCESS = "vllm:request_success_total"
VLLM_PROMPT_TOKENS = "vllm:prompt_tokens_total"
VLLM_GENERATION_TOKENS = "vllm:generation_tokens_total"
VLLM_PROMPT_TOKENS_BY_SOURCE = "vllm:prompt_tokens_by_source_total"
VLLM_PROMPT_TOKENS_CACHED_BY_SOURCE = "vllm:prompt_tokens_cached_by_source_total"
VLLM_RUNNING = "vllm:num_requests_running"
VLLM_WAITING = "vllm:num_requests_waiting"
VLLM_WAITING_BY_REASON = "vllm:num_requests_waiting_by_reason"
VLLM_KV_CACHE_USAGE = "vllm:kv_cache_usage_perc"
VLLM_PREEMPTIONS = "vllm:num_preemptions_total"
VLLM_ADMISSION_REJECTIONS = "vllm:admission_rejections_total"  # from vLLM 0.32 (common.vllm_compat)
VLLM_PREFIX_CACHE_QUERIES = "vllm:prefix_cache_queries_total"
VLLM_PREFIX_CACHE_HITS = "vllm:prefix_cache_hits_total"
VLLM_ITERATION_TOKENS = "vllm:iteration_tokens_total"  # a histogram, despite the suffix
VLLM_TTFT = "vllm:time_to_first_token_seconds"
VLLM_INTER_TOKEN_LATENCY = "vllm:inter_token_latency_seconds"
VLLM_E2E_LATENCY = "vllm:e2e_request_latency_seconds"
VLLM_TIME_PER_OUTPUT_TOKEN = "vllm:request_time_per_output_token_seconds"
# The official backend's name for VLLM_INTER_TOKEN_LATENCY, gone from vLLM 0.32 (see metrics/official_names.py)
VLLM_TIME_PER_OUTPUT_TOKEN_OFFICIAL = "vllm:time_per_output_token_seconds"
VLLM_QUEUE_TIME = "vllm:request_queue_time_seconds"
VLLM_PREFILL_TIME = "vllm:request_prefill_time_seconds"
VLLM_DECODE_TIME = "vllm:request_decode_time_seconds"
VLLM_INFERENCE_TIME = "vllm:request_inference_time_seconds"
VLLM_REQUEST_PROMPT_TOKENS = "vllm:request_prompt_tokens"
VLLM_REQUEST_GENERATION_TOKENS = "vllm:request_generation_tokens"
VLLM_REQUEST_PARAMS_N = "vllm:request_params_n"
# The histograms observed once per generated token: replaying them as Triton histograms costs a round trip per
# token, so PER_TOKEN_HISTOGRAMS chooses how they are published (docs/benchmarks.md has the numbers).
PER_TOKEN_HISTOGRAMS = (VLLM_INTER_TOKEN_LATENCY, VLLM_TIME_PER_OUTPUT_TOKEN_OFFICIAL)
# The 8 families the official backend exports: dashboards built on it keep working here.
OFFICIAL_BACKEND_FAMILIES = (VLLM_PROMPT_TOKENS, VLLM_GENERATION_TOKENS, VLLM_TTFT, VLLM_TIME_PER_OUTPUT_TOKEN_OFFICIAL,
                             VLLM_E2E_LATENCY, VLLM_REQUEST_PROMPT_TOKENS, VLLM_REQUEST_GENERATION_TOKENS,
                             VLLM_REQUEST_PARAMS_N)

# -- Triton 2.51's own families -------------------------------------------------------------------------------------
TRITON_SUCCESS = "nv_inference_request_success"
TRITON_FAILURE = "nv_inference_request_failure"
TRITON_INFERENCES = "nv_inference_count"
TRITON_EXECUTIONS = "nv_inference_exec_count"
TRITON_PENDING = "nv_inference_pending_request_count"
TRITON_REQUEST_DURATION = "nv_inference_request_duration_us"
TRITON_QUEUE_DURATION = "nv_inference_queue_duration_us"
TRITON_COMPUTE_INPUT_DURATION = "nv_inference_compute_input_duration_us"
TRITON_COMPUTE_INFER_DURATION = "nv_inference_compute_infer_duration_us"
TRITON_COMPUTE_OUTPUT_DURATION = "nv_inference_compute_output_duration_us"
TRITON_CPU_UTILIZATION = "nv_cpu_utilization"
TRITON_CPU_MEMORY_USED = "nv_cpu_memory_used_bytes"
TRITON_CPU_MEMORY_TOTAL = "nv_cpu_memory_total_bytes"
TRITON_GPU_UTILIZATION = "nv_gpu_utilization"
TRITON_GPU_MEMORY_USED = "nv_gpu_memory_used_bytes"
TRITON_GPU_MEMORY_TOTAL = "nv_gpu_memory_total_bytes"
TRITON_GPU_POWER = "nv_gpu_power_usage"
TRITON_FAMILIES = tuple(v for k, v in dict(globals()).items() if k.startswith("TRITON_") and isinstance(v, str))
# Only present on machines with NVIDIA GPUs (and --allow-gpu-metrics).
GPU_ONLY = frozenset({TRITON_GPU_UTILIZATION, TRITON_GPU_MEMORY_USED, TRITON_GPU_MEMORY_TOTAL, TRITON_GPU_POWER})

# -- labels ---------------------------------------------------------------------------------------------------------
MODEL = "model"  # Triton's model name (every series of a model)
VERSION = "version"
MODEL_INSTANCE = "model_instance"  # the backend's and vLLM's families, per Triton model instance
ENGINE = "engine"  # vLLM's engine index
OUTCOME = "outcome"  # REQUESTS_FINISHED: common.vocabulary.Outcome
STATE = "state"  # ENGINE_HEALTH_STATE: common.vocabulary.HealthState
STAGE = "stage"  # METRICS_ERRORS: record or publish
OPERATION = "operation"  # METRICS_PUBLISH_CALLS: observe, increment or set
FINISHED_REASON = "finished_reason"  # VLLM_REQUEST_SUCCESS
REASON = "reason"  # TRITON_FAILURE
SOURCE = "source"  # VLLM_PROMPT_TOKENS_BY_SOURCE and _CACHED_BY_SOURCE
