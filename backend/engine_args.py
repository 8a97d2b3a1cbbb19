"""model.json → vLLM `AsyncEngineArgs`, validated so that a mistake fails the model load by name.

The official backend passes model.json straight to `AsyncEngineArgs(**config)`: an unknown key is a
TypeError without context and a wrong type surfaces deep inside the engine, if at all. Here every key is
checked against the installed vLLM's own dataclass fields and annotations (so a new vLLM's arguments are
accepted without code changes). Like the official backend, strings such as "true" or "0.5" are accepted
where a bool or a number is expected.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from pathlib import Path
from typing import Any

from ..common.errors import ConfigError
from .json_config import load_json_object

ENGINE_ARGS_FILE = "model.json"
# Keys holding a local path that may be written relative to the model directory.
_PATH_KEYS = ("model", "tokenizer")
_SCALARS = (str, int, float, bool)


def load_model_json(model_dir: Path) -> dict[str, Any]:
    path = model_dir / ENGINE_ARGS_FILE
    if not path.is_file():
        raise ConfigError(f"{ENGINE_ARGS_FILE} with the vLLM engine arguments must be provided in {model_dir}")
    return load_json_object(path, "engine arguments")


def resolve_local_paths(config: dict[str, Any], model_dir: Path) -> dict[str, Any]:
    """A relative `model`/`tokenizer` naming a directory beside model.json means that directory."""
    resolved = dict(config)
    for key in _PATH_KEYS:
        value = resolved.get(key)
        if isinstance(value, str) and not Path(value).is_absolute() and (model_dir / value).exists():
            resolved[key] = str((model_dir / value).resolve())
    return resolved


def _field_types() -> dict[str, tuple[Any, Any]]:
    """Each AsyncEngineArgs field's resolved annotation and default.

    vLLM 0.32 annotates `quantization_config` with a class it imports only for type checkers; it is supplied here.
    Any other name that cannot be resolved fails the load with this message rather than silently going unchecked
    (the unit tests resolve every field of the installed vLLM, so an upgrade that breaks this is seen at once).
    """
    from vllm.config.quantization import QuantizationConfigArgs
    from vllm.engine.arg_utils import AsyncEngineArgs

    try:
        hints = typing.get_type_hints(AsyncEngineArgs, localns={"QuantizationConfigArgs": QuantizationConfigArgs})
    except NameError as exc:
        raise ConfigError(f"cannot read the engine arguments of the installed vLLM ({exc}); this backend version "
                          "does not support it") from exc
    return {field.name: (hints[field.name], field.default) for field in dataclasses.fields(AsyncEngineArgs)}


def _check_value(key: str, value: Any, annotation: Any, default: Any) -> Any:
    """Validate one value with pydantic's lax mode; return the coerced scalar or the original value."""
    if value is None and default is None:
        return value
    from pydantic import TypeAdapter, ValidationError

    try:
        adapter = TypeAdapter(annotation)
    except Exception:
        return value  # a type pydantic cannot describe: vLLM validates it when building the config
    try:
        coerced = adapter.validate_python(value)
    except ValidationError as exc:
        reason = exc.errors()[0].get("msg", str(exc))
        raise ConfigError(
            f"{ENGINE_ARGS_FILE}: engine argument {key!r} has the wrong type: got {value!r} "
            f"({type(value).__name__}); expected {_describe(annotation)} ({reason})"
        ) from None
    return coerced if isinstance(value, _SCALARS) and isinstance(coerced, _SCALARS) else value


def _describe(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def validate_engine_config(config: dict[str, Any]) -> dict[str, Any]:
    """Every key must be an AsyncEngineArgs field and every value must fit its annotation."""
    types = _field_types()
    checked: dict[str, Any] = {}
    for key, value in config.items():
        if key not in types:
            close = difflib.get_close_matches(key, types, n=3)
            hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            raise ConfigError(
                f"{ENGINE_ARGS_FILE}: unknown engine argument {key!r} (not a field of vLLM's "
                f"AsyncEngineArgs){hint}"
            )
        annotation, default = types[key]
        checked[key] = _check_value(key, value, annotation, default)
    return checked


def build_engine_args(config: dict[str, Any]) -> Any:
    from vllm.engine.arg_utils import AsyncEngineArgs

    try:
        return AsyncEngineArgs(**config)
    except Exception as exc:
        raise ConfigError(f"{ENGINE_ARGS_FILE}: invalid engine arguments: {exc}") from exc
