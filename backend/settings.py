"""The backend's config.pbtxt keys (compatible with the official backend), each declared once with its meaning.

The health monitor's keys live in health.settings; docs/configuration.md's table is generated from both.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from ..common.errors import ConfigError
from ..common.parameters import AutoOr, ParameterTable, Switch, choice, seconds

# Keys Triton's Python backend itself reads from the same `parameters` block.
PYTHON_BACKEND_KEYS = frozenset({"EXECUTION_ENV_PATH", "FORCE_CPU_ONLY_INPUT_TENSORS"})
MAX_RESPONSE_THREADS = 32


def _gpu_ids(value: Any) -> Any:
    """"0,1" as (0, 1): comma-separated, non-negative, distinct GPU indices."""
    if not isinstance(value, str):
        return value
    if not value.strip():
        return None
    try:
        ids = tuple(int(part) for part in value.split(","))
    except ValueError:
        raise ConfigError(f"config.pbtxt parameter GPU_DEVICE_IDS: {value!r}; expected comma-separated GPU "
                          "indices such as \"0,1\"") from None
    if any(i < 0 for i in ids) or len(set(ids)) != len(ids):
        raise ConfigError(f"config.pbtxt parameter GPU_DEVICE_IDS: {value!r}; GPU indices must be non-negative "
                          "and distinct")
    return ids


class BackendSettings(ParameterTable):
    """Everything config.pbtxt switches in the backend and its metrics."""

    report_custom_metrics: Switch = Field(False, alias="REPORT_CUSTOM_METRICS", description=(
        "`true` publishes vLLM's and the backend's metrics (also needs `disable_log_stats` not true in model.json). "
        "One log line at load says whether metrics are on and, if not, which switch is off — including a server "
        "started with `--allow-metrics=false`, which still loads the model."))
    engine_start_timeout_s: float = seconds(600.0, "ENGINE_START_TIMEOUT_S", (
        "the bound on starting an engine, its warm-up request included (at load and at each restart): an engine "
        "not serving by then fails the load (or the restart) with \"the vLLM engine did not start within N s "
        "(ENGINE_START_TIMEOUT_S)\", and the engine still starting is shut down. A large model's first start "
        "(weights, CUDA graphs, compilation) may need more."))
    unload_drain_timeout_s: float = seconds(30.0, "UNLOAD_DRAIN_TIMEOUT_S", (
        "on unload (or server shutdown), running requests may finish for this long; new ones are refused with "
        "\"the model is being unloaded\"; what is still running then ends with an `UNAVAILABLE` error saying so. "
        "`0` aborts at once. At shutdown the bound is also cut to tritonserver's `--exit-timeout-secs` minus "
        "20 s, so that the engine shuts down before the server gives up on it."), zero_allowed=True)
    per_token_histograms: choice(Literal["series", "histogram"]) = Field(
        "series", alias="PER_TOKEN_HISTOGRAMS", description=(
            "how the two per-token histograms reach `:8002`: `series` as their `_bucket`/`_sum`/`_count` counter "
            "series (a cost independent of traffic), `histogram` as Triton histogram families like every other "
            "histogram (one IPC round trip per generated token; docs/benchmarks.md has both costs)"))
    response_threads: int = Field(1, alias="RESPONSE_THREADS", gt=0, le=MAX_RESPONSE_THREADS,
                                  json_schema_extra={"bound_reason": "each is a thread of the stub"}, description=(
        "threads that send responses to Triton, each request on one of them, its responses in order: each send "
        "waits for the server's answer, so with one thread the first tokens of many simultaneous streams leave "
        "one after another. On the H200 four served 1.13–1.16 × the tokens/s of one at 64 streams, within the "
        "noise (docs/benchmarks.md, \"Where the first token's time goes\"). How often they are behind the "
        "engine: vllm_triton_response_threads_behind_seconds_total (docs/serving.md)"))
    gil_switch_interval_ms: Annotated[float | None, AutoOr] = Field(
        None, alias="GIL_SWITCH_INTERVAL_MS", gt=0, le=100, allow_inf_nan=False,
        json_schema_extra={"bound_reason": "a thread holding the GIL longer stalls every other (Python's own is 5)"},
        description=(
            "how long a thread of the stub may hold Python's GIL while another waits for it "
            "(`sys.setswitchinterval`, per stub process). Each response's send releases the GIL and waits up to that "
            "long to get it back from a busy engine loop, so where the stub is saturated (many streams of a fast "
            "engine) responses queue one interval apart. `auto`: Python's 5 ms, and 0.5 ms only while a response "
            "thread is behind (it has spent more than 10 ms on the responses it took at once); on the H200 at 256 "
            "streams first tokens p99 in 0.55–0.58 s instead of 2.2 s, tokens/s within the noise everywhere measured "
            "(docs/benchmarks.md, \"Only while a response thread is behind\"). A number fixes the interval: `5` is "
            "Python's own (this backend's behaviour before `auto`), `0.5` always short"))
    shared_engine: Switch = Field(False, alias="SHARED_ENGINE", description=(
        "`true`: the model's instances (`instance_group` `count`: N) share one vLLM engine, each a front end of it "
        "with sockets of its own, as `vllm serve --api-server-count N` — instead of an engine each. For a model whose "
        "tokens one stub process cannot keep up with (docs/serving.md, \"Several stubs, one engine\")"))
    otlp_metrics: Switch = Field(False, alias="OTLP_METRICS", description=(
        "`true`: the instance's metrics also go out over OTLP/HTTP, with exemplars when tracing is on (needs "
        "`REPORT_CUSTOM_METRICS`; see "
        "[OTLP metrics with exemplars](observability.md#otlp-metrics-with-exemplars-opt-in))"))
    gpu_device_ids: Annotated[tuple[int, ...] | None, BeforeValidator(_gpu_ids)] = Field(
        None, alias="GPU_DEVICE_IDS", json_schema_extra={"type_text": "GPU indices"}, description=(
            "as in the official backend: pins a `KIND_MODEL` instance to these GPUs (`\"0,1\"`, one per tensor × "
            "pipeline rank) through `CUDA_VISIBLE_DEVICES`"))

    @model_validator(mode="after")
    def _otlp_needs_the_registry(self) -> BackendSettings:
        if self.otlp_metrics and not self.report_custom_metrics:
            raise ConfigError('config.pbtxt parameter OTLP_METRICS: "true" needs REPORT_CUSTOM_METRICS "true" (the '
                              "OTLP metrics are the same registry Triton's endpoint shows)")
        return self
