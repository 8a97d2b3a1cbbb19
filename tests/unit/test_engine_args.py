"""model.json validation against the installed vLLM's AsyncEngineArgs."""

import json

import pytest

from vllm_triton_observable.backend.engine_args import load_model_json, resolve_local_paths, validate_engine_config
from vllm_triton_observable.common.errors import ConfigError


def test_valid_config_with_official_style_strings_is_coerced():
    config = validate_engine_config({"model": "m", "enforce_eager": "true", "gpu_memory_utilization": "0.5",
                                     "max_model_len": 512, "served_model_name": ["a"]})
    assert config["enforce_eager"] is True
    assert config["gpu_memory_utilization"] == 0.5
    assert config["served_model_name"] == ["a"]


def test_unknown_key_is_named_with_a_suggestion():
    with pytest.raises(ConfigError, match=r"unknown engine argument 'max_model_lenght'.*did you mean 'max_model_len'"):
        validate_engine_config({"model": "m", "max_model_lenght": 5})


@pytest.mark.parametrize("key, value", [("max_model_len", "abc"), ("enforce_eager", [1]), ("dtype", "float13"),
                                        ("tensor_parallel_size", 1.5)])
def test_wrong_type_is_named(key, value):
    with pytest.raises(ConfigError, match=f"engine argument '{key}' has the wrong type"):
        validate_engine_config({"model": "m", key: value})


def test_null_allowed_where_the_default_is_null():
    assert validate_engine_config({"model": "m", "max_model_len": None})["max_model_len"] is None


def test_model_json_errors(tmp_path):
    with pytest.raises(ConfigError, match="model.json with the vLLM engine arguments must be provided"):
        load_model_json(tmp_path)
    (tmp_path / "model.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_model_json(tmp_path)
    (tmp_path / "model.json").write_text("[1]")
    with pytest.raises(ConfigError, match="must be a JSON object"):
        load_model_json(tmp_path)


def test_relative_model_path_resolves_beside_model_json(tmp_path):
    (tmp_path / "weights").mkdir()
    (tmp_path / "model.json").write_text(json.dumps({"model": "weights", "tokenizer": "org/name"}))
    config = resolve_local_paths(load_model_json(tmp_path), tmp_path)
    assert config["model"] == str((tmp_path / "weights").resolve())
    assert config["tokenizer"] == "org/name"  # not a local directory: left for the hub / vLLM


def test_every_engine_argument_of_the_installed_vllm_has_a_resolved_type():
    """typing.get_type_hints resolves each annotation; none is left as text (which would go unchecked)."""
    import dataclasses

    from vllm.engine.arg_utils import AsyncEngineArgs

    from vllm_triton_observable.backend.engine_args import _field_types

    types = _field_types()
    assert set(types) == {f.name for f in dataclasses.fields(AsyncEngineArgs)}
    assert not [name for name, (annotation, _) in types.items() if isinstance(annotation, str)]
