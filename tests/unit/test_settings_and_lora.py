"""config.pbtxt switches, device checks and multi_lora.json."""

import json

import pytest

from backend.device import check_device
from backend.errors import ConfigError, InvalidRequest
from backend.lora import LoraRegistry
from backend.settings import BackendSettings


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
