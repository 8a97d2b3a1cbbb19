"""config.pbtxt switches, device checks and multi_lora.json."""

import json

import pytest

from vllm_triton_observable.backend.device import check_device
from vllm_triton_observable.backend.lora import LoraRegistry
from vllm_triton_observable.backend.settings import BackendSettings
from vllm_triton_observable.common.errors import ConfigError, InvalidRequest


def config(**params):
    return {"parameters": {k: {"string_value": v} for k, v in params.items()}}


def test_switches_are_off_by_default_and_accept_true():
    assert BackendSettings.from_model_config({}) == BackendSettings(False)
    assert BackendSettings.from_model_config(config(REPORT_CUSTOM_METRICS="True")) == BackendSettings(True)


def test_a_typo_in_a_switch_is_an_error():
    with pytest.raises(ConfigError, match="REPORT_CUSTOM_METRICS: 'ture' is not a boolean"):
        BackendSettings.from_model_config(config(REPORT_CUSTOM_METRICS="ture"))


class Log:
    def info(self, message):
        pass


def test_kind_gpu_with_tensor_parallel_is_rejected():
    with pytest.raises(ConfigError, match="KIND_GPU is for single-GPU models"):
        check_device({"tensor_parallel_size": 2}, {"model_instance_kind": "GPU"}, Log())
    check_device({"tensor_parallel_size": 2}, {"model_instance_kind": "MODEL"}, Log())


def test_lora_registry(tmp_path):
    assert LoraRegistry.load(tmp_path, {}).enabled is False
    with pytest.raises(ConfigError, match="multi_lora.json does not exist"):
        LoraRegistry.load(tmp_path, {"enable_lora": True})
    (tmp_path / "adapter").mkdir()
    (tmp_path / "multi_lora.json").write_text(json.dumps({"alpha": "adapter", "beta": "/abs/path"}))
    registry = LoraRegistry.load(tmp_path, {"enable_lora": "true"})
    assert registry.adapters == {"alpha": str((tmp_path / "adapter").resolve()), "beta": "/abs/path"}
    registry.check("alpha")
    with pytest.raises(InvalidRequest, match="unknown adapter 'gamma'; available: alpha, beta"):
        registry.check("gamma")
    with pytest.raises(InvalidRequest, match="LoRA is not enabled"):
        LoraRegistry().check("alpha")
    assert registry.request_for("beta").lora_int_id == 2


def test_an_unknown_key_fails_with_a_suggestion_and_every_known_key_passes():
    from vllm_triton_observable.backend.settings import PYTHON_BACKEND_KEYS
    from vllm_triton_observable.common.parameters import check_known_keys
    from vllm_triton_observable.health.settings import HealthSettings

    known = BackendSettings.KEYS | HealthSettings.keys() | PYTHON_BACKEND_KEYS
    check_known_keys(["REPORT_CUSTOM_METRICS", "ENABLE_VLLM_HEALTH_CHECK", "EXECUTION_ENV_PATH",
                      "FORCE_CPU_ONLY_INPUT_TENSORS", "GPU_DEVICE_IDS", "HEALTH_CHECK_INTERVAL_S"], known)
    with pytest.raises(ConfigError, match="HEALTH_CHECK_INTERVAL: unknown to the vllm backend; did you mean "
                                          "HEALTH_CHECK_INTERVAL_S?"):
        check_known_keys(["HEALTH_CHECK_INTERVAL"], known)
    with pytest.raises(ConfigError, match="did you mean REPORT_CUSTOM_METRICS"):
        check_known_keys(["REPORT_CUSTOM_METRIC"], known)


def test_contradictory_health_settings_fail():
    from vllm_triton_observable.health.settings import HealthSettings

    with pytest.raises(ConfigError, match=r"HEALTH_DEGRADED_PROBE_S \(5\) must be less than HEALTH_PROBE_TIMEOUT_S"):
        HealthSettings.from_model_config(config(ENABLE_VLLM_HEALTH_CHECK="true", HEALTH_DEGRADED_PROBE_S="5",
                                                HEALTH_PROBE_TIMEOUT_S="2"))
    short = HealthSettings.from_model_config(config(ENABLE_VLLM_HEALTH_CHECK="true", HEALTH_PROBE_TIMEOUT_S="1"))
    assert short.degraded_probe_s == 0.5  # the default threshold follows a short timeout down


def test_drain_timeout_defaults_to_30_s_and_may_be_zero():
    assert BackendSettings.from_model_config({}).unload_drain_timeout_s == 30
    assert BackendSettings.from_model_config(config(UNLOAD_DRAIN_TIMEOUT_S="0")).unload_drain_timeout_s == 0
    with pytest.raises(ConfigError, match="UNLOAD_DRAIN_TIMEOUT_S: '-1' is not a non-negative float"):
        BackendSettings.from_model_config(config(UNLOAD_DRAIN_TIMEOUT_S="-1"))


def test_gpu_device_ids_pin_a_kind_model_instance(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    check_device({"tensor_parallel_size": 2}, {"model_instance_kind": "MODEL"}, Log(), "2,3")
    import os

    assert os.environ["CUDA_VISIBLE_DEVICES"] == "2,3"
    with pytest.raises(ConfigError, match="lists 1 GPU"):
        check_device({"tensor_parallel_size": 2}, {"model_instance_kind": "MODEL"}, Log(), "1")
    with pytest.raises(ConfigError, match="non-negative and distinct"):
        check_device({}, {"model_instance_kind": "MODEL"}, Log(), "1,1")


def test_response_threads_are_a_bounded_count():
    assert BackendSettings.from_model_config({}).response_threads == 1
    assert BackendSettings.from_model_config(config(RESPONSE_THREADS="4")).response_threads == 4
    for bad, says in (("0", "is not a positive int"), ("2.5", "is not a positive int"),
                      ("33", "must be at most 32")):
        with pytest.raises(ConfigError, match=says):
            BackendSettings.from_model_config(config(RESPONSE_THREADS=bad))
