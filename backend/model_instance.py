"""The composition root's second half: one Triton model instance's rooms — backend, metrics, health — built from
its plan (backend.plan) and wired together.

Each part is started on one `contextlib.ExitStack`, its stop registered the moment it runs, so the teardown is the
start read backwards — at unload, and also when a load fails half-way (nothing started is left without an owner).
With tests/unit/test_architecture.py's leave the only modules that import more than one room: the health monitor
gets the engine runner and the generation service through the interfaces it defines (`health.ports`), the metrics
get plain callbacks. Imported by model.py inside `initialize()` only (it imports vLLM).
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
from pathlib import Path
from typing import Any

from ..common.engine_activity import EngineActivity
from ..common.server_flags import server_argv
from ..common.vllm_compat import vllm_version
from ..common.vocabulary import Outcome
from ..health.monitor import HealthMonitor
from ..metrics import names
from ..metrics.backend_families import BackendInfo
from ..metrics.exporter import MetricsExporter
from ..metrics.health_families import HealthFamilies
from ..metrics.series_lease import SeriesLease
from ..tracing.spans import RequestTracer
from .engine_args import build_engine_args
from .engine_runner import EngineRunner
from .engine_share import EngineShare
from .generation import GenerationService
from .ipc_dir import IpcDirectory, of_server
from .parent_watch import ParentWatch
from .plan import InstancePlan, make_plan
from .response_thread import InflightRequest
from .switch_interval import SwitchInterval
from .trace_attributes import UNSAMPLED
from .triton_io import PbTritonIO, TritonLogger, TritonRequestView
from .unload_watch import UnloadWatch, http_readiness

# What to leave of tritonserver's exit timeout for vLLM's shutdown (7.5-9 s on two idle cores, up to ≈ 15 s on busy
# ones: docs/health.md, "Shutdown"); the rest of it is the drain's.
ENGINE_SHUTDOWN_S = 20.0
# What an instance sharing the engine (SHARED_ENGINE) may take, after its drain, to close its client: the engine's
# owner waits that much longer for it before shutting the engine down.
OTHERS_CLOSE_S = 10.0


class ModelInstance:
    @classmethod
    def load(cls, args: dict[str, str], model_dir: Path, pb_utils: Any) -> ModelInstance:
        """Plan from what Triton and the server say, then build."""
        plan = make_plan(args, model_dir, server_argv(), os.environ, vllm_version(), os.getpid())
        return cls(plan, pb_utils, TritonLogger())

    def __init__(self, plan: InstancePlan, pb_utils: Any, log: TritonLogger) -> None:
        self.plan = plan
        self.log = log
        self._pb = pb_utils
        self._closing = threading.Lock()
        self._closed = False
        self._drain_timeout_s = plan.settings.unload_drain_timeout_s
        with contextlib.ExitStack() as stack:
            self._build(stack)
            self._teardown = stack.pop_all()

    def _build(self, stack: contextlib.ExitStack) -> None:
        plan = self.plan
        for level, line in plan.notes:
            getattr(self.log, level)(line)
        os.environ.update(plan.environment)  # the one change of process-wide state, decided by the plan
        self.ipc = IpcDirectory.create()
        stack.callback(self.ipc.remove)
        self.tracer = self._tracer()
        if self.tracer is not None:
            stack.callback(self.tracer.shutdown)
        self.activity = EngineActivity()
        self.metrics = self._metrics_exporter()
        if self.metrics is not None:
            stack.callback(self.metrics.stop)  # after the engine: the requests it ends are still counted
        watched = self.metrics is not None or plan.health.enabled
        stat_loggers = [*(self.metrics.stat_loggers() if self.metrics else []),
                        *([self.activity.stat_logger_class()] if watched else [])]
        # Process-wide, so set before the engine loop and the response threads exist (GIL_SWITCH_INTERVAL_MS)
        fixed_ms = plan.settings.gil_switch_interval_ms
        self.switch_interval = SwitchInterval() if fixed_ms is None else None  # `auto`: sets Python's own now
        if fixed_ms is not None:
            sys.setswitchinterval(fixed_ms / 1000)
        share = self._engine_share()
        if share is not None:
            stack.callback(share.leave)  # after the engine's shutdown: the owner removes the sockets' directory
        self.runner = EngineRunner(build_engine_args(dict(plan.engine_config)), stat_loggers,
                                   start_timeout_s=plan.settings.engine_start_timeout_s, log_info=self.log.info,
                                   own_trace_headers=UNSAMPLED if plan.vllm_traces else None, ipc=self.ipc,
                                   activity=self.activity, share=share,
                                   others_leave_s=plan.settings.unload_drain_timeout_s + OTHERS_CLOSE_S)
        # before the engine starts: a server killed meanwhile must not orphan it
        ParentWatch(self.log.info, ipc_root=self.ipc.root).start()
        self.log.info(f"starting the vLLM engine for model {plan.engine_config.get('model')!r} (then one warm-up "
                      "request)")
        self.runner.start()  # on failure it has stopped what it started
        stack.callback(self.runner.shutdown)
        # As vLLM's own API server does: move the millions of startup objects out of the collector's way, so
        # that a full collection does not pause the engine loop for a second under load.
        gc.collect()
        gc.freeze()
        io = PbTritonIO(batched=plan.max_batch_size > 0)
        self.service = GenerationService(self.runner, io, plan.lora, self.log, self._finished,
                                         decoupled=plan.decoupled, tracer=self.tracer,
                                         exemplars=self._exemplar_sink(),
                                         response_threads=plan.settings.response_threads,
                                         switch_interval=self.switch_interval,
                                         model_name=plan.labels.model_name,
                                         trace_attributes=plan.labels.span_attributes())
        stack.callback(self.service.close)
        stack.callback(lambda: self.service.drain(self._drain_timeout_s))
        # Built before the metrics start: its families are in the registry for the publisher's first flush, so
        # they are on /metrics with their values when the model turns READY (started after, to watch a served engine)
        self.monitor = self._health_monitor() if plan.health.enabled else None
        if self.metrics is not None:
            self.metrics.start(self._info(), self.service.inflight_count, self.service.responses.behind.seconds)
        if self.monitor is not None:
            self.monitor.start()
            stack.callback(self.monitor.stop)
        self.unload_watch = self._unload_watch()
        if self.unload_watch is not None:
            self.unload_watch.start()
            stack.callback(self.unload_watch.stop)
        mode = "decoupled: streams" if plan.decoupled else "not decoupled: one response per request, for infer()"
        mode += f"; GIL switch interval {sys.getswitchinterval() * 1000:g} ms"
        if self.switch_interval is not None:
            mode += f", {self.switch_interval.hurried_s * 1000:g} ms while a response thread is behind"
        if plan.max_batch_size > 0:
            mode += (f"; batched admission: up to {plan.max_batch_size} queued requests per execute(), inputs and "
                     "outputs with a batch dimension of 1")
        self.log.info(f"model {plan.labels.model_name} (instance {plan.labels.instance_name}) is ready ({mode})")

    def _engine_share(self) -> EngineShare | None:
        """SHARED_ENGINE with several instances: this one's slot among the engine's clients (slot 0 starts it)."""
        plan = self.plan
        if plan.engine_clients == 1:
            return None
        share = EngineShare.join(self.ipc.root.parent, os.getppid(), plan.labels.model_name,
                                 plan.labels.model_version, plan.engine_clients)
        role = "starts the engine" if share.owner else f"uses the engine of instance slot 0 (pid {share.owner_pid()})"
        self.log.info(f"shared engine: instance {plan.labels.instance_name} is client {share.index} of "
                      f"{share.clients}; it {role}")
        return share

    def _metrics_exporter(self) -> MetricsExporter | None:
        """One clear line saying whether metrics are on and, if not, which switch is off."""
        plan = self.plan
        reason = plan.metrics_off
        if reason is None and not MetricsExporter.triton_supports_metrics(self._pb):
            reason = "this Triton build has no metrics support"
        if reason is not None:
            self.log.info(f"metrics: off for {plan.labels.model_name} ({reason})")
            return None
        self.log.info(f"metrics: on for {plan.labels.model_name} (REPORT_CUSTOM_METRICS is true): vLLM's families "
                      "and vllm_triton_* on Triton's metrics endpoint")
        # One load of this instance at a time publishes its series (a reload starts the new before the old goes)
        lease = SeriesLease.for_labels(of_server(self.ipc.root.parent, os.getppid(), "series"),
                                       plan.labels.metric_labels(), self.log.info)
        return MetricsExporter(self._pb, plan.labels.metric_labels(), self.log.error, self.activity,
                               plan.settings.per_token_histograms, otlp=plan.settings.otlp_metrics,
                               service_name=plan.service_name, lease=lease)

    def _exemplar_sink(self) -> Any:
        """Where traced requests' timings go when OTLP metrics carry exemplars (OTLP_METRICS and tracing on)."""
        if self.tracer is None or self.metrics is None or self.metrics.exemplars is None:
            return None
        return self.metrics.exemplars.request_finished

    def _tracer(self) -> RequestTracer | None:
        """Spans when tritonserver traces in OpenTelemetry mode (vLLM's own join them: the plan saw to that)."""
        trace = self.plan.server.trace
        if trace is None:
            return None
        return RequestTracer(trace, {names.TRACE_MODEL_ATTRIBUTE: self.plan.labels.model_name},
                             on_dropped=lambda n: self.metrics.spans_dropped(n) if self.metrics else None,
                             log_warn=self.log.warn, service_name=self.plan.service_name)

    def _health_monitor(self) -> HealthMonitor:
        name = self.plan.labels.model_name
        families = HealthFamilies(self.metrics.registry) if self.metrics else None
        unload = (lambda: self._pb.unload_model(name)) if self.plan.server.explicit_model_control else None
        return HealthMonitor(self.plan.health, name, engine=self.runner, requests=self.service,
                             activity=self.activity, log=self.log, report=families, unload=unload,
                             incidents=self.tracer.incidents(name) if self.tracer else None)

    def _unload_watch(self) -> UnloadWatch | None:
        server, labels = self.plan.server, self.plan.labels
        if server.http_url is None:
            self.log.warn("tritonserver runs without HTTP: an unload waits for every running request, however long "
                          "(UNLOAD_DRAIN_TIMEOUT_S needs the HTTP endpoint to notice the unload)")
            return None
        # An instance using another's engine (SHARED_ENGINE) closes its client as soon as it has drained: Triton
        # finalizes a model's instances one after the other, so the engine's owner, finalized first, would wait in
        # vain for an instance whose finalize() comes only after its own.
        on_unload = self.service.drain if self.runner.owns_engine else self.close
        return UnloadWatch(labels.model_name, http_readiness(server.http_url, labels.model_name, labels.model_version),
                           on_unload, self.close, self.plan.settings.unload_drain_timeout_s,
                           max(0.0, server.exit_timeout_s - ENGINE_SHUTDOWN_S), self.log)

    def _info(self) -> BackendInfo:
        from .. import __version__

        return BackendInfo(vllm_version(), __version__, self.metrics is not None, self.plan.health.enabled)

    def _finished(self, _request: InflightRequest, outcome: Outcome) -> None:
        if self.metrics is not None:
            self.metrics.request_finished(outcome)

    def execute(self, requests: list[Any]) -> None:
        """Hand each request to the service, which answers every one itself; nothing may raise out of here."""
        if self.metrics is not None:
            self.metrics.executed(len(requests))
        for request in requests:
            try:
                self.service.submit(request, TritonRequestView(request))
            except Exception as exc:  # e.g. no response sender: nothing can be answered, so say it in the log
                self.log.error(f"a request could not be accepted: {type(exc).__name__}: {exc}")

    def close(self, drain_timeout_s: float | None = None) -> None:
        """Unload: the start read backwards — stop watching, let in-flight requests finish (bounded), stop the
        engine, the metrics, the tracer.

        Called by `finalize()` and, when the server exits, by the unload watch; whoever comes second waits for
        the first to finish and returns."""
        if self.unload_watch is not None:
            self.unload_watch.stop()  # returns at once on the watch's own thread
        with self._closing:
            if self._closed:
                return
            self._closed = True
            if drain_timeout_s is not None:
                self._drain_timeout_s = drain_timeout_s
            self._teardown.close()
            behind = f"response threads behind the engine for {self.service.responses.behind.seconds():.1f} s"
            if self.switch_interval is not None:
                behind += f", the GIL switch interval shortened {self.switch_interval.hurries} times"
            what = ("the engine and its processes are shut down" if self.runner.owns_engine
                    else "its client of the shared engine is closed")
            self.log.info(f"unloaded: {what} ({behind} while serving)")
