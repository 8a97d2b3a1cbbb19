"""The composition root: one Triton model instance's rooms — backend, metrics, health — wired together.

The only module that imports more than one room (tests/unit/test_architecture.py keeps it so): the health monitor
gets the engine runner and the generation service through the interfaces it defines (`health.ports`), the metrics
get plain callbacks. Imported by model.py inside `initialize()` only (it imports vLLM).
"""

from __future__ import annotations

import gc
import json
import os
import threading
from pathlib import Path
from typing import Any

from ..common.errors import ConfigError
from ..common.parameters import check_known_keys, config_parameters
from ..common.server_flags import exit_timeout_s, explicit_model_control, http_url, server_argv
from ..common.vllm_compat import vllm_version, window_note
from ..common.vocabulary import Outcome
from ..health.heartbeat import Heartbeat
from ..health.monitor import HealthMonitor
from ..health.settings import HealthSettings, Recovery
from ..metrics import names
from ..metrics.backend_families import BackendInfo
from ..metrics.exporter import MetricsExporter, gate
from ..metrics.health_families import HealthFamilies
from ..metrics.tracing import VLLM_SERVICE_NAME, RequestTracer, TraceSettings
from .device import check_device
from .engine_args import build_engine_args, load_model_json, resolve_local_paths, validate_engine_config
from .engine_runner import EngineRunner
from .engine_watch import STUB_PID
from .generation import GenerationService
from .ipc_dir import IpcDirectory
from .lora import LoraRegistry
from .parent_watch import ParentWatch
from .response_thread import InflightRequest
from .settings import PYTHON_BACKEND_KEYS, BackendSettings
from .trace_attributes import UNSAMPLED
from .triton_io import PbTritonIO, TritonLogger, TritonRequestView
from .unload_watch import UnloadWatch, http_readiness

# What to leave of tritonserver's exit timeout for vLLM's shutdown (≈ 5 s here: its worker, then its EngineCore).
ENGINE_SHUTDOWN_S = 10.0


class ModelInstance:
    def __init__(self, args: dict[str, str], model_dir: Path) -> None:
        self.log = TritonLogger()
        self._closing = threading.Lock()
        self._closed = False
        model_config = json.loads(args["model_config"])
        decoupled = bool(model_config.get("model_transaction_policy", {}).get("decoupled", False))
        params = config_parameters(model_config)
        check_known_keys(params, BackendSettings.KEYS | HealthSettings.keys() | PYTHON_BACKEND_KEYS)
        self.settings = BackendSettings.from_model_config(model_config)
        self.health_settings = HealthSettings.from_model_config(model_config)
        explicit = explicit_model_control(server_argv())
        if self.health_settings.enabled and self.health_settings.recovery is Recovery.UNLOAD and not explicit:
            raise ConfigError(
                "HEALTH_RECOVERY=unload needs tritonserver --model-control-mode=explicit (unloading a model in "
                "any other mode can crash Triton); use restart or fail, or start the server in explicit mode"
            )
        inside, note = window_note(vllm_version())
        (self.log.info if inside else self.log.warn)(note)
        engine_config = validate_engine_config(resolve_local_paths(load_model_json(model_dir), model_dir))
        check_device(engine_config, args, self.log, params.get("GPU_DEVICE_IDS"))
        self.lora = LoraRegistry.load(model_dir, engine_config)
        self.metrics = self._metrics_exporter(args, engine_config)
        self.heartbeat = Heartbeat()

        def own_request() -> bool:  # read by vLLM's logger once the runner exists
            return self.runner.serving_own_request

        stat_loggers = [*(self.metrics.stat_loggers(paused=own_request) if self.metrics else []),
                        *([self.heartbeat.logger_class()] if self.health_settings.enabled else [])]
        self.tracer = self._tracer(args, engine_config)
        self.ipc = IpcDirectory.create()
        os.environ[STUB_PID] = str(os.getpid())  # the EngineCore ends with this stub (backend.engine_watch)
        self.runner = EngineRunner(build_engine_args(engine_config), stat_loggers,
                                   start_timeout_s=self.settings.engine_start_timeout_s, log_info=self.log.info,
                                   own_trace_headers=UNSAMPLED if "otlp_traces_endpoint" in engine_config else None,
                                   ipc=self.ipc)
        # before the engine starts: a server killed meanwhile must not orphan it
        ParentWatch(self.log.info, ipc_root=self.ipc.root).start()
        self.log.info(f"starting the vLLM engine for model {engine_config.get('model')!r} (then one warm-up request)")
        try:
            self.runner.start()
        except BaseException:
            self.ipc.remove()
            raise
        # As vLLM's own API server does: move the millions of startup objects out of the collector's way, so
        # that a full collection does not pause the engine loop for a second under load.
        gc.collect()
        gc.freeze()
        self.service = GenerationService(self.runner, PbTritonIO(), self.lora, self.log, self._finished,
                                         decoupled=decoupled, tracer=self.tracer,
                                         exemplars=self._exemplar_sink(),
                                         response_threads=self.settings.response_threads,
                                         trace_attributes={names.TRACE_MODEL_ATTRIBUTE: args["model_name"],
                                                           "triton.model_version": args["model_version"],
                                                           "gen_ai.request.model": args["model_name"]})
        self.monitor = self._health_monitor(args["model_name"], explicit) if self.health_settings.enabled else None
        self.unload_watch = self._unload_watch(args)
        if self.metrics is not None:
            self.metrics.start(self._info(), self.service.inflight_count)
        if self.monitor is not None:
            self.monitor.start()
        if self.unload_watch is not None:
            self.unload_watch.start()
        mode = "decoupled: streams" if decoupled else "not decoupled: one response per request, for infer()"
        self.log.info(f"model {args['model_name']} (instance {args.get('model_instance_name', '?')}) is ready "
                      f"({mode})")

    def _metrics_exporter(self, args: dict[str, str], engine_config: dict[str, Any]) -> MetricsExporter | None:
        """One clear line saying whether metrics are on and, if not, which switch is off."""
        import triton_python_backend_utils as pb_utils

        if self.settings.otlp_metrics and not self.settings.report_custom_metrics:
            raise ConfigError('config.pbtxt parameter OTLP_METRICS: "true" needs REPORT_CUSTOM_METRICS "true" (the '
                              "OTLP metrics are the same registry Triton's endpoint shows)")
        reason = gate(self.settings.report_custom_metrics, engine_config)
        if reason is None and not MetricsExporter.server_allows_metrics(pb_utils):
            reason = "tritonserver runs with --allow-metrics=false"
        if reason is not None:
            self.log.info(f"metrics: off for {args['model_name']} ({reason})")
            return None
        self.log.info(f"metrics: on for {args['model_name']} (REPORT_CUSTOM_METRICS is true): vLLM's families "
                      "and vllm_triton_* on Triton's metrics endpoint")
        return MetricsExporter(pb_utils, args, self.log.error, self.settings.per_token_histograms,
                               otlp=self.settings.otlp_metrics)

    def _exemplar_sink(self) -> Any:
        """Where traced requests' timings go when OTLP metrics carry exemplars (OTLP_METRICS and tracing on)."""
        if self.tracer is None or self.metrics is None or self.metrics.exemplars is None:
            return None
        return self.metrics.exemplars.request_finished

    def _tracer(self, args: dict[str, str], engine_config: dict[str, Any]) -> RequestTracer | None:
        """Spans when tritonserver traces in OpenTelemetry mode; vLLM's own span joins them unless model.json
        already sends vLLM's traces somewhere (`otlp_traces_endpoint`)."""
        settings = TraceSettings.from_server(server_argv())
        if settings is None:
            return None
        self.log.info(f"tracing: on (tritonserver traces in OpenTelemetry mode); spans go to {settings.endpoint}")
        tracer = RequestTracer(settings, {names.TRACE_MODEL_ATTRIBUTE: args["model_name"]},
                               on_dropped=lambda n: self.metrics.spans_dropped(n) if self.metrics else None,
                               log_warn=self.log.warn)
        if "otlp_traces_endpoint" not in engine_config:
            engine_config["otlp_traces_endpoint"] = settings.endpoint
            os.environ.setdefault("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")  # vLLM's default is gRPC
            # After the backend's tracer took its own name: vLLM's spans would otherwise be "unknown_service".
            os.environ.setdefault("OTEL_SERVICE_NAME", VLLM_SERVICE_NAME)
        return tracer

    def _health_monitor(self, model_name: str, explicit: bool) -> HealthMonitor:
        import triton_python_backend_utils as pb_utils

        families = HealthFamilies(self.metrics.registry) if self.metrics else None
        unload = (lambda: pb_utils.unload_model(model_name)) if explicit else None
        return HealthMonitor(self.health_settings, model_name, engine=self.runner, requests=self.service,
                             heartbeat=self.heartbeat, log=self.log, report=families, unload=unload,
                             incidents=self.tracer.incidents(model_name) if self.tracer else None)

    def _unload_watch(self, args: dict[str, str]) -> UnloadWatch | None:
        argv = server_argv()
        base = http_url(argv)
        if base is None:
            self.log.warn("tritonserver runs without HTTP: an unload waits for every running request, however long "
                          "(UNLOAD_DRAIN_TIMEOUT_S needs the HTTP endpoint to notice the unload)")
            return None
        return UnloadWatch(args["model_name"], http_readiness(base, args["model_name"], args["model_version"]),
                           self.service.drain, self.close, self.settings.unload_drain_timeout_s,
                           max(0.0, exit_timeout_s(argv) - ENGINE_SHUTDOWN_S), self.log)

    def _info(self) -> BackendInfo:
        from .. import __version__

        return BackendInfo(vllm_version(), __version__, self.metrics is not None,
                           self.health_settings.enabled)

    def _finished(self, _request: InflightRequest, outcome: Outcome) -> None:
        if self.metrics is not None:
            self.metrics.request_finished(outcome)

    def execute(self, requests: list[Any]) -> None:
        """Hand each request to the service, which answers every one itself; nothing may raise out of here."""
        for request in requests:
            try:
                self.service.submit(request, TritonRequestView(request))
            except Exception as exc:  # e.g. no response sender: nothing can be answered, so say it in the log
                self.log.error(f"a request could not be accepted: {type(exc).__name__}: {exc}")

    def close(self, drain_timeout_s: float | None = None) -> None:
        """Unload: stop watching, let in-flight requests finish (bounded), then stop the engine and metrics.

        Called by `finalize()` and, when the server exits, by the unload watch; whoever comes second waits for
        the first to finish and returns."""
        if self.unload_watch is not None:
            self.unload_watch.stop()  # returns at once on the watch's own thread
        with self._closing:
            if self._closed:
                return
            self._closed = True
            if self.monitor is not None:
                self.monitor.stop()
            self.service.drain(self.settings.unload_drain_timeout_s if drain_timeout_s is None else drain_timeout_s)
            self.service.close()
            if self.metrics is not None:
                self.metrics.stop()
            if self.tracer is not None:
                self.tracer.shutdown()
            self.ipc.remove()
            self.log.info("unloaded: the engine and its processes are shut down")
