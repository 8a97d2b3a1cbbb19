"""The backend's own families (`vllm_triton_` prefix: no colon, which Prometheus reserves for recording rules)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ..common.engine_activity import EngineActivity
from ..common.vocabulary import Outcome
from . import names
from .publisher import PublishCost
from .registry import InstanceRegistry, Kind

INFO_HELP = "Backend build and switches; always 1."
# Requests per execute(): powers of two up to Triton's largest sensible max_batch_size for one vLLM engine
EXECUTE_BATCH_BUCKETS = (1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0)


@dataclass(frozen=True)
class BackendInfo:
    vllm_version: str
    backend_version: str
    metrics_enabled: bool
    health_check_enabled: bool


class BackendFamilies:
    """Info, request outcomes and the exporter's own liveness; gauges are refreshed before each publish."""

    def __init__(self, registry: InstanceRegistry, info: BackendInfo, inflight_count: Callable[[], int],
                 activity: EngineActivity, behind_seconds: Callable[[], float] = lambda: 0.0) -> None:
        classes = registry.classes()
        gauge, counter, histogram = classes[Kind.GAUGE], classes[Kind.COUNTER], classes[Kind.HISTOGRAM]
        self._activity = activity
        self._inflight_count = inflight_count
        self._behind_seconds = behind_seconds
        self._behind_published = 0.0
        gauge(names.INFO, INFO_HELP,
              labelnames=["vllm_version", "backend_version", "metrics_enabled", "health_check_enabled"]).labels(
            info.vllm_version, info.backend_version, str(info.metrics_enabled).lower(),
            str(info.health_check_enabled).lower()).set(1)
        self.inflight = gauge(names.REQUESTS_IN_FLIGHT,
                              "Requests accepted by this model instance and not yet answered with a final response.")
        finished = counter(names.REQUESTS_FINISHED,
                           "Requests answered with a final response, by outcome: completed, cancelled (by the "
                           "client), rejected (bad input), failed (engine or internal error).",
                           labelnames=[names.OUTCOME])
        self.finished = {outcome: finished.labels(outcome.value) for outcome in Outcome}
        self.execute_batch = histogram(names.EXECUTE_BATCH_SIZE,
                                       "Requests Triton handed this instance in one execute() call: 1 each unless "
                                       "batched admission is on (config.pbtxt max_batch_size > 0), when requests "
                                       "queued meanwhile come together; the count is the execute() calls.",
                                       buckets=EXECUTE_BATCH_BUCKETS)
        self.behind = counter(names.RESPONSE_THREADS_BEHIND,
                              "Seconds the response threads were behind the engine, summed over threads: a thread "
                              "is behind from 10 ms after it took the responses waiting in its queue, if it has not "
                              "sent them all by then, until its queue is empty. Its rate is the average number of "
                              "threads behind (at most config.pbtxt RESPONSE_THREADS): near it, the stub's one "
                              "process is what limits, and the streams' tokens reach their clients late.")
        self.spans_dropped = counter(names.TRACE_SPANS_DROPPED,
                                     "Trace spans the exporter could not deliver to the OTLP receiver (tracing on "
                                     "only: tritonserver --trace-config mode=opentelemetry).")
        self.last_progress = gauge(names.ENGINE_LAST_PROGRESS_TIMESTAMP,
                                   "Unix time the engine last made progress: its last step (or the start of the "
                                   "busy spell) while requests are in flight, the time of publishing while idle. "
                                   "time() minus it is the stall; it also grows when the backend stops publishing "
                                   "(a wedged stub).")
        self.last_record = gauge(names.LAST_RECORD_TIMESTAMP,
                                 "Deprecated, kept for dashboards that read it: use "
                                 f"{names.ENGINE_LAST_PROGRESS_TIMESTAMP}. Unix time of the engine's last step "
                                 "with output (0 before the first; growing while the engine is idle).")

        self.publishes = counter(names.METRICS_PUBLISHES, "Publishes of this instance's metrics to Triton "
                                 "(one per second, and more when requests finish; the cost families below divided by "
                                 "this are per publish).")
        calls = counter(names.METRICS_PUBLISH_CALLS, "Triton custom-metric calls made to publish, by operation "
                        "(observe replays histograms, increment sends counters and gauges, set mends a gauge).",
                        labelnames=[names.OPERATION])
        self.publish_calls = {operation: calls.labels(operation) for operation in ("observe", "increment", "set")}
        self.publish_wall = counter(names.METRICS_PUBLISH_WALL, "Wall-clock time the publisher thread spent "
                                    "publishing (off vLLM's event loop: Triton's observe and increment release the "
                                    "GIL).")
        self.publish_cpu = counter(names.METRICS_PUBLISH_CPU, "CPU time the publisher thread spent publishing.")

        self.otlp_exports = counter(names.OTLP_METRIC_EXPORTS, "Exports of this instance's metrics over OTLP "
                                    "(config.pbtxt OTLP_METRICS; 0 when off).")
        self.otlp_failed = counter(names.OTLP_METRIC_EXPORTS_FAILED, "OTLP metric exports that failed (no "
                                   "receiver, an error answer or a timeout); the next interval sends a new snapshot.")

    def otlp_exported(self, ok: bool) -> None:
        self.otlp_exports.inc()
        if not ok:
            self.otlp_failed.inc()

    def published(self, cost: PublishCost) -> None:
        """Called by the publisher after each flush: the cost shows at the next one."""
        self.publishes.inc()
        for operation, count in cost.calls.items():
            self.publish_calls[operation].inc(count)
        self.publish_wall.inc(cost.wall_s)
        self.publish_cpu.inc(cost.cpu_s)

    def request_finished(self, outcome: Outcome) -> None:
        self.finished[outcome].inc()

    def refresh(self) -> None:
        """Called by the publisher before it snapshots the registry."""
        inflight = self._inflight_count()
        self.inflight.set(inflight)
        behind = self._behind_seconds()
        if behind > self._behind_published:
            self.behind.inc(behind - self._behind_published)
            self._behind_published = behind
        # Ages on the activity's monotonic clock, turned into Unix time here: a step of the wall clock cannot fake one.
        now = self._activity.now()
        self.last_progress.set(time.time() - (now - self._activity.last_progress(inflight)))
        last_step = self._activity.last_step
        if last_step is not None:
            self.last_record.set(time.time() - (now - last_step))
