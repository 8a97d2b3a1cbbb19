"""The load's plan: every decision from Triton's args, the model directory, the server's command line and the
environment, without Triton or an engine (backend.plan)."""

from __future__ import annotations

import json
import os

import pytest

from vllm_triton_observable.backend.engine_runner import WORKER_SHUTDOWN_GRACE_S
from vllm_triton_observable.backend.engine_watch import STUB_PID
from vllm_triton_observable.backend.plan import make_plan
from vllm_triton_observable.common.errors import ConfigError
from vllm_triton_observable.tracing.spans import VLLM_SERVICE_NAME

SERVER = ["tritonserver", "--model-repository=/models"]
TRACING = [*SERVER, "--trace-config=mode=opentelemetry", "--trace-config=opentelemetry,url=http://otel:4318/v1/traces"]


def args(decoupled: bool = True, kind: str = "MODEL", device: str = "0", max_batch_size: int = 0,
         **params: str) -> dict[str, str]:
    config = {"parameters": {k: {"string_value": v} for k, v in params.items()},
              "model_transaction_policy": {"decoupled": decoupled}, "max_batch_size": max_batch_size}
    return {"model_config": json.dumps(config), "model_name": "m", "model_version": "1",
            "model_instance_name": "m_0", "model_instance_kind": kind, "model_instance_device_id": device}


@pytest.fixture
def model_dir(tmp_path):
    (tmp_path / "model.json").write_text(json.dumps({"model": "facebook/opt-125m", "max_model_len": 512}))
    return tmp_path


def plan(model_dir, argv=SERVER, environ=None, **kwargs):
    return make_plan(args(**kwargs), model_dir, argv, {} if environ is None else environ, "0.32.0", 4242)


def test_a_plain_load_decides_labels_mode_settings_and_the_stub_pid(model_dir):
    decided = plan(model_dir, REPORT_CUSTOM_METRICS="true", RESPONSE_THREADS="4")
    assert decided.labels.metric_labels() == {"model": "m", "version": "1", "model_instance": "m_0"}
    assert decided.decoupled and decided.settings.response_threads == 4 and decided.metrics_off is None
    assert decided.max_batch_size == 0 and plan(model_dir, max_batch_size=64).max_batch_size == 64
    assert decided.environment[STUB_PID] == "4242"
    assert decided.engine_config == {"model": "facebook/opt-125m", "max_model_len": 512}
    assert not decided.vllm_traces and decided.server.trace is None
    level, line = decided.notes[0]
    assert level == "info" and line.startswith("vLLM 0.32.0 (this backend is tested with vLLM "), decided.notes
    assert make_plan(args(), model_dir, SERVER, {}, "0.10.0", 1).notes[0][0] == "warn"


def test_with_the_opentelemetry_sdk_off_only_triton_traces_and_the_load_says_so(model_dir):
    decided = plan(model_dir, TRACING, environ={"OTEL_SDK_DISABLED": "true"})
    assert decided.server.trace is None and not decided.vllm_traces
    assert ("info", "tracing: Triton's own spans only: OTEL_SDK_DISABLED=true turns the OpenTelemetry SDK off, so "
                    "neither this backend nor vLLM traces requests") in decided.notes
    assert not any("tracing" in line for _, line in plan(model_dir).notes)  # no tracing configured: no word of it


def test_tracing_puts_the_endpoint_in_the_engine_config_and_leaves_the_operators_names(model_dir):
    decided = plan(model_dir, TRACING)
    assert decided.engine_config["otlp_traces_endpoint"] == "http://otel:4318/v1/traces" and decided.vllm_traces
    assert decided.environment["OTEL_SERVICE_NAME"] == VLLM_SERVICE_NAME
    assert decided.environment["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"
    assert decided.service_name == "vllm-triton-backend"
    own = plan(model_dir, TRACING, environ={"OTEL_SERVICE_NAME": "checkout", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL":
                                           "grpc"})
    assert "OTEL_SERVICE_NAME" not in own.environment and "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL" not in own.environment
    assert own.service_name == "checkout"


def test_model_json_sending_vllms_spans_elsewhere_keeps_its_endpoint(model_dir):
    (model_dir / "model.json").write_text(json.dumps({"model": "facebook/opt-125m",
                                                      "otlp_traces_endpoint": "http://elsewhere:4318/v1/traces"}))
    decided = plan(model_dir, TRACING)
    assert decided.engine_config["otlp_traces_endpoint"] == "http://elsewhere:4318/v1/traces"
    assert "OTEL_SERVICE_NAME" not in decided.environment


def test_the_operators_worker_grace_wins(model_dir):
    assert plan(model_dir).environment["VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS"] == WORKER_SHUTDOWN_GRACE_S == "20"
    assert "VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS" not in plan(
        model_dir, environ={"VLLM_WORKER_SHUTDOWN_TIMEOUT_SECONDS": "3"}).environment


def test_the_engine_core_is_spawned_unless_the_operator_chose(model_dir):
    decided = plan(model_dir)
    assert decided.environment["VLLM_WORKER_MULTIPROC_METHOD"] == "spawn"
    assert ("info", "vLLM's EngineCore is started by spawn (VLLM_WORKER_MULTIPROC_METHOD)") in decided.notes
    forked = plan(model_dir, environ={"VLLM_WORKER_MULTIPROC_METHOD": "fork"})
    assert "VLLM_WORKER_MULTIPROC_METHOD" not in forked.environment
    assert ("info", "vLLM's EngineCore is started by fork (VLLM_WORKER_MULTIPROC_METHOD of the environment)") in \
        forked.notes


def test_unload_recovery_needs_explicit_mode_read_from_the_server(model_dir):
    params = {"ENABLE_VLLM_HEALTH_CHECK": "true", "HEALTH_RECOVERY": "unload"}
    with pytest.raises(ConfigError, match="HEALTH_RECOVERY=unload needs tritonserver --model-control-mode=explicit"):
        plan(model_dir, **params)
    explicit = plan(model_dir, [*SERVER, "--model-control-mode=explicit"], **params)
    assert explicit.server.explicit_model_control and explicit.health.recovery.value == "unload"


def test_why_metrics_are_off_is_decided_once(model_dir):
    assert plan(model_dir).metrics_off == 'REPORT_CUSTOM_METRICS is not "true" in config.pbtxt'
    assert plan(model_dir, [*SERVER, "--allow-metrics=false"], REPORT_CUSTOM_METRICS="true").metrics_off == \
        "tritonserver runs with --allow-metrics=false"


def test_a_kind_gpu_instance_sees_its_gpu_only(model_dir):
    decided = plan(model_dir, kind="GPU", device="3")
    assert decided.environment["CUDA_VISIBLE_DEVICES"] == "3"
    assert ("info", "KIND_GPU instance: using GPU 3 (CUDA_VISIBLE_DEVICES)") in decided.notes
    pinned = plan(model_dir, GPU_DEVICE_IDS="1,2")
    assert pinned.environment["CUDA_VISIBLE_DEVICES"] == "1,2"


def test_an_unknown_key_fails_before_anything_else(model_dir):
    with pytest.raises(ConfigError, match="HEALTH_CHECK_INTERVAL: unknown to the vllm backend; did you mean"):
        plan(model_dir, HEALTH_CHECK_INTERVAL="1")


def test_planning_changes_nothing_in_the_process(model_dir):
    before = dict(os.environ)
    plan(model_dir, TRACING, environ=os.environ, kind="GPU", device="1")
    assert dict(os.environ) == before


def test_a_shared_engine_counts_the_instances_triton_starts(model_dir):
    def shared(groups):
        config = {"parameters": {"SHARED_ENGINE": {"string_value": "true"}}, "instance_group": groups,
                  "model_transaction_policy": {"decoupled": True}}
        return make_plan({**args(), "model_config": json.dumps(config)}, model_dir, SERVER, {}, "0.32.0", 1)

    assert plan(model_dir).engine_clients == 1  # an engine each, as Triton's own backends do
    decided = shared([{"count": 4, "kind": "KIND_MODEL"}])
    assert decided.engine_clients == 4 and ("info", "SHARED_ENGINE: the model's 4 instances share one engine") in \
        decided.notes
    assert shared([{"count": 2, "kind": "KIND_GPU", "gpus": [1]}, {"count": 1, "kind": "KIND_GPU", "gpus": [1]}]) \
        .engine_clients == 3
    assert shared([{"count": 1, "kind": "KIND_MODEL"}]).engine_clients == 1
    with pytest.raises(ConfigError, match=r"SHARED_ENGINE: the model's instances are on GPUs 0, 1, and one engine "
                                          r"cannot serve instances on several GPUs"):
        shared([{"count": 2, "kind": "KIND_GPU", "gpus": [0, 1]}])
