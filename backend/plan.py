"""The first half of a model load: every decision, made from what Triton, the model directory, the server's
command line and the environment say, before anything starts.

`make_plan` is pure — it reads the model's files but starts, sets and writes nothing — so each rule of a load is a
unit test without Triton or vLLM, and the order of the decisions cannot matter: vLLM's spans join the traces
because the plan's engine configuration carries the tracing endpoint, not because one line ran before another.
`backend.model_instance` builds from the plan. Part of the composition root: it reads the health and metrics
settings beside the backend's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..common.errors import ConfigError
from ..common.parameters import check_known_keys, config_parameters
from ..common.server_flags import exit_timeout_s, explicit_model_control, http_url, metrics_allowed, trace_config
from ..common.vllm_compat import window_note
from ..health.settings import EXPLICIT_MODEL_CONTROL, HealthSettings
from ..metrics import names
from ..metrics.exporter import gate
from ..tracing.spans import VLLM_SERVICE_NAME, TraceSettings
from .device import device_environment
from .engine_args import load_model_json, resolve_local_paths, validate_engine_config
from .engine_runner import WORKER_SHUTDOWN_GRACE_S
from .engine_watch import STUB_PID
from .lora import LoraRegistry
from .settings import PYTHON_BACKEND_KEYS, BackendSettings

# Every config.pbtxt key read, one table per room (docs/configuration.md is generated from them).
PARAMETER_TABLES = (BackendSettings, HealthSettings)


@dataclass(frozen=True)
class ServerContext:
    """What the tritonserver command line says (read once, from the stub's parent process)."""

    explicit_model_control: bool
    metrics_allowed: bool
    http_url: str | None  # None: the server runs without HTTP
    exit_timeout_s: float
    trace: TraceSettings | None  # None unless the server traces in OpenTelemetry mode

    @classmethod
    def from_argv(cls, argv: list[str], environ: Mapping[str, str]) -> ServerContext:
        return cls(explicit_model_control(argv), metrics_allowed(argv), http_url(argv), exit_timeout_s(argv),
                   TraceSettings.from_server(argv, environ))


@dataclass(frozen=True)
class Labels:
    """Who this instance is, as Triton names it."""

    model_name: str
    model_version: str
    instance_name: str

    @classmethod
    def from_args(cls, args: Mapping[str, str]) -> Labels:
        return cls(args["model_name"], args["model_version"], args.get("model_instance_name", args["model_name"]))

    def metric_labels(self) -> dict[str, str]:
        """On every series: Triton's model and version, and the instance (two instances never collide)."""
        return {names.MODEL: self.model_name, names.VERSION: self.model_version,
                names.MODEL_INSTANCE: self.instance_name}

    def span_attributes(self) -> dict[str, str]:
        """On every request span: Triton's model and version, and the model as the GenAI conventions name it."""
        return {names.TRACE_MODEL_ATTRIBUTE: self.model_name, names.TRACE_MODEL_VERSION_ATTRIBUTE: self.model_version,
                "gen_ai.request.model": self.model_name}


@dataclass(frozen=True)
class InstancePlan:
    labels: Labels
    decoupled: bool
    # config.pbtxt's max_batch_size: 0 (the official contract) or, for batched admission, how many queued requests
    # Triton may hand over in one execute(); each response then carries the batch dimension of 1 its request had
    max_batch_size: int
    settings: BackendSettings
    health: HealthSettings
    server: ServerContext
    engine_config: Mapping[str, Any]  # model.json as vLLM gets it: paths resolved, the tracing endpoint applied
    lora: LoraRegistry
    # Set in the process before anything starts (the only process-wide state a load changes): the GPUs, vLLM's
    # tracing, the worker's shutdown grace, the EngineCore's start method, the stub's pid for the EngineCore's watch.
    environment: Mapping[str, str]
    service_name: str  # the backend's own spans and OTLP metrics (the operator's OTEL_SERVICE_NAME if set)
    metrics_off: str | None  # why metrics are off, or None when they are on
    # How many instances are front ends of one engine (SHARED_ENGINE and instance_group counts); 1: an engine each
    engine_clients: int = 1
    notes: tuple[tuple[str, str], ...] = field(default=())  # (level, line) the load logs about its decisions

    @property
    def vllm_traces(self) -> bool:
        """vLLM sends spans of its own (to the backend's endpoint or model.json's)."""
        return "otlp_traces_endpoint" in self.engine_config


def shared_engine_clients(instance_groups: list[dict]) -> int:
    """How many instances Triton starts (`count` per group, per GPU of a KIND_GPU group: Triton's normalized
    config lists them), all clients of one engine; instances on several GPUs cannot share one, which runs where its
    first instance runs (its `tensor_parallel_size` places it)."""
    gpus = {gpu for group in instance_groups if group.get("kind") == "KIND_GPU" for gpu in group.get("gpus", [])}
    if len(gpus) > 1:
        raise ConfigError(f"SHARED_ENGINE: the model's instances are on GPUs {', '.join(map(str, sorted(gpus)))}, "
                          "and one engine cannot serve instances on several GPUs: put them on one GPU (instance_group "
                          "gpus: [N]) or use KIND_MODEL, where model.json's tensor_parallel_size places the engine")
    return max(1, sum(int(group.get("count", 1)) * max(1, len(group.get("gpus", []))) for group in instance_groups))


# vLLM's start method for its EngineCore, `fork` by default on a GPU. A fork of the stub is a copy of the stub process
# (Triton's stub executable, its embedded interpreter, its memory), and there the engine took a quarter longer per
# step on the H100 than spawned: on a small model's fast steps the EngineCore's Python is the engine's pace
# (docs/benchmarks.md, "The engine's own pace, and a spawned EngineCore"). Spawned, it is the environment's Python
# executable, as under `vllm serve`, whose command line sets spawn. vLLM's CPU platform always spawns.
ENGINE_START_METHOD = "VLLM_WORKER_MULTIPROC_METHOD"


def make_plan(args: Mapping[str, str], model_dir: Path, argv: list[str], environ: Mapping[str, str],
              vllm_version: str, stub_pid: int) -> InstancePlan:
    """Everything a load decides; raises ConfigError with the sentence for the first thing that is wrong."""
    model_config = json.loads(args["model_config"])
    params = config_parameters(model_config)
    check_known_keys(params, {*PYTHON_BACKEND_KEYS, *(key for table in PARAMETER_TABLES for key in table.keys())})
    server = ServerContext.from_argv(argv, environ)
    settings = BackendSettings.from_params(params)
    health = HealthSettings.from_params(params, **{EXPLICIT_MODEL_CONTROL: server.explicit_model_control})
    inside, version_note = window_note(vllm_version)
    notes = [("info" if inside else "warn", version_note)]
    engine_config = validate_engine_config(resolve_local_paths(load_model_json(model_dir), model_dir))
    device_env, device_note = device_environment(engine_config, args, settings.gpu_device_ids)
    notes += [("info", device_note)] if device_note else []
    environment = {**device_env, STUB_PID: str(stub_pid)}
    if "VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS" not in environ:  # the operator's wins
        environment["VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS"] = WORKER_SHUTDOWN_GRACE_S
    if ENGINE_START_METHOD not in environ:  # the operator's wins
        environment[ENGINE_START_METHOD] = "spawn"
    notes.append(("info", f"vLLM's EngineCore is started by {environ.get(ENGINE_START_METHOD, 'spawn')} ("
                          f"{ENGINE_START_METHOD}{' of the environment' if ENGINE_START_METHOD in environ else ''})"))
    if server.trace is not None:
        notes.append(("info", f"tracing: on (tritonserver traces in OpenTelemetry mode); spans go to "
                              f"{server.trace.endpoint}"))
        if "otlp_traces_endpoint" not in engine_config:  # else model.json sends vLLM's spans elsewhere
            engine_config = {**engine_config, "otlp_traces_endpoint": server.trace.endpoint}
            defaults = {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",  # vLLM's default is gRPC
                        "OTEL_SERVICE_NAME": VLLM_SERVICE_NAME}  # vLLM's spans would be "unknown_service"
            environment.update({key: value for key, value in defaults.items() if key not in environ})
    elif trace_config(argv).get("mode") == "opentelemetry":  # no TraceSettings in that mode: OTEL_SDK_DISABLED
        notes.append(("info", "tracing: Triton's own spans only: OTEL_SDK_DISABLED=true turns the OpenTelemetry SDK "
                              "off, so neither this backend nor vLLM traces requests"))
    metrics_off = gate(settings.report_custom_metrics, engine_config)
    if metrics_off is None and not server.metrics_allowed:
        metrics_off = "tritonserver runs with --allow-metrics=false"
    engine_clients = 1
    if settings.shared_engine:
        engine_clients = shared_engine_clients(model_config.get("instance_group", []))
        notes.append(("info", f"SHARED_ENGINE: the model's {engine_clients} instances share one engine" if
                      engine_clients > 1 else "SHARED_ENGINE: the model has one instance, so it has its own engine"))
    return InstancePlan(
        labels=Labels.from_args(args),
        decoupled=bool(model_config.get("model_transaction_policy", {}).get("decoupled", False)),
        max_batch_size=int(model_config.get("max_batch_size", 0)),
        settings=settings, health=health, server=server, engine_config=engine_config,
        lora=LoraRegistry.load(model_dir, engine_config), environment=environment,
        service_name=environ.get("OTEL_SERVICE_NAME", names.TRACE_SERVICE), metrics_off=metrics_off,
        engine_clients=engine_clients, notes=tuple(notes))
