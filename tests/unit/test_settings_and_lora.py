"""config.pbtxt switches, device checks and multi_lora.json."""

import json

import pytest

from vllm_triton_observable.backend.device import device_environment
from vllm_triton_observable.backend.lora import LoraRegistry
from vllm_triton_observable.backend.settings import BackendSettings
from vllm_triton_observable.common.errors import ConfigError, InvalidRequest


def config(**params):
    return {"parameters": {k: {"string_value": v} for k, v in params.items()}}


def test_switches_are_off_by_default_and_accept_true():
    assert BackendSettings.from_model_config({}) == BackendSettings(report_custom_metrics=False)
    assert BackendSettings.from_model_config(config(REPORT_CUSTOM_METRICS="True")) == BackendSettings(
        report_custom_metrics=True)
    assert BackendSettings.from_model_config(config(REPORT_CUSTOM_METRICS="")).report_custom_metrics is False


def test_a_typo_in_a_switch_is_an_error():
    with pytest.raises(ConfigError, match="REPORT_CUSTOM_METRICS: 'ture' is not a boolean"):
        BackendSettings.from_model_config(config(REPORT_CUSTOM_METRICS="ture"))


def test_kind_gpu_with_tensor_parallel_is_rejected():
    with pytest.raises(ConfigError, match="KIND_GPU is for single-GPU models"):
        device_environment({"tensor_parallel_size": 2}, {"model_instance_kind": "GPU"})
    assert device_environment({"tensor_parallel_size": 2}, {"model_instance_kind": "MODEL"}) == ({}, None)
    assert device_environment({}, {"model_instance_kind": "GPU", "model_instance_device_id": "1"}) == (
        {"CUDA_VISIBLE_DEVICES": "1"}, "KIND_GPU instance: using GPU 1 (CUDA_VISIBLE_DEVICES)")


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

    known = BackendSettings.keys() | HealthSettings.keys() | PYTHON_BACKEND_KEYS
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


def test_gpu_device_ids_pin_a_kind_model_instance():
    ids = BackendSettings.from_model_config(config(GPU_DEVICE_IDS="2,3")).gpu_device_ids
    assert ids == (2, 3)
    assert device_environment({"tensor_parallel_size": 2}, {"model_instance_kind": "MODEL"}, ids)[0] == {
        "CUDA_VISIBLE_DEVICES": "2,3"}
    with pytest.raises(ConfigError, match="lists 1 GPU"):
        device_environment({"tensor_parallel_size": 2}, {"model_instance_kind": "MODEL"}, (1,))
    for bad, says in (("1,1", "non-negative and distinct"), ("-1", "non-negative and distinct"),
                      ("a", "expected comma-separated GPU indices")):
        with pytest.raises(ConfigError, match=f"GPU_DEVICE_IDS: '{bad}'; .*{says}"):
            BackendSettings.from_model_config(config(GPU_DEVICE_IDS=bad))


def test_response_threads_are_a_bounded_count():
    assert BackendSettings.from_model_config({}).response_threads == 1
    assert BackendSettings.from_model_config(config(RESPONSE_THREADS="4")).response_threads == 4
    for bad, says in (("0", "is not a positive int"), ("2.5", "is not a positive int"),
                      ("33", "must be at most 32")):
        with pytest.raises(ConfigError, match=says):
            BackendSettings.from_model_config(config(RESPONSE_THREADS=bad))


@pytest.mark.parametrize("key, value, message", [
    ("PER_TOKEN_HISTOGRAMS", "buckets", "PER_TOKEN_HISTOGRAMS: 'buckets'; use series or histogram"),
    ("ENGINE_START_TIMEOUT_S", "nan", "ENGINE_START_TIMEOUT_S: 'nan' is not a positive float"),
    ("ENGINE_START_TIMEOUT_S", "0", "ENGINE_START_TIMEOUT_S: '0' is not a positive float"),
    ("OTLP_METRICS", "true", 'OTLP_METRICS: "true" needs REPORT_CUSTOM_METRICS "true"'),
    ("GIL_SWITCH_INTERVAL_MS", "0", "GIL_SWITCH_INTERVAL_MS: '0' is not a positive float"),
    ("GIL_SWITCH_INTERVAL_MS", "nan", "GIL_SWITCH_INTERVAL_MS: 'nan' is not a positive float"),
    ("GIL_SWITCH_INTERVAL_MS", "fast", "GIL_SWITCH_INTERVAL_MS: 'fast' is not a positive float or \"auto\""),
    ("GIL_SWITCH_INTERVAL_MS", "200", "GIL_SWITCH_INTERVAL_MS must be at most 100 (got 200): a thread holding the GIL"),
])
def test_each_bad_value_is_one_sentence_naming_the_key(key, value, message):
    with pytest.raises(ConfigError) as raised:
        BackendSettings.from_model_config(config(**{key: value}))
    assert message in str(raised.value) and "pydantic" not in str(raised.value), raised.value


def test_the_gil_switch_interval_is_auto_unless_a_number_fixes_it():
    assert BackendSettings.from_model_config({}).gil_switch_interval_ms is None
    assert BackendSettings.from_model_config(config(GIL_SWITCH_INTERVAL_MS="5")).gil_switch_interval_ms == 5.0
    assert BackendSettings.from_model_config(config(GIL_SWITCH_INTERVAL_MS="0.5")).gil_switch_interval_ms == 0.5


def test_auto_in_any_case_leaves_the_gil_switch_interval_to_the_backend():
    for text in ("auto", "AUTO", " Auto "):
        assert BackendSettings.from_model_config(config(GIL_SWITCH_INTERVAL_MS=text)).gil_switch_interval_ms is None
    row = next(r for r in BackendSettings.reference_rows() if r.key == "GIL_SWITCH_INTERVAL_MS")
    assert (row.type, row.default) == ("`auto` or number, > 0", "`auto`"), row
