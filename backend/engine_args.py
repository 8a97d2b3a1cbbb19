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
import sys
from pathlib import Path
from typing import Any

from backend.errors import ConfigError
from backend.json_config import load_json_object

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
    """Each AsyncEngineArgs field's resolved annotation (None when it cannot be resolved) and default."""
    from vllm.engine.arg_utils import AsyncEngineArgs, EngineArgs

    namespace = vars(sys.modules[EngineArgs.__module__])
    types: dict[str, tuple[Any, Any]] = {}
    for field in dataclasses.fields(AsyncEngineArgs):
        annotation = field.type
        if isinstance(annotation, str):
            try:
                annotation = eval(annotation, namespace)  # noqa: S307 - vLLM's own annotation text
            except Exception:
                annotation = None
        types[field.name] = (annotation, field.default)
    return types


def _check_value(key: str, value: Any, annotation: Any, default: Any) -> Any:
    """Validate one value with pydantic's lax mode; return the coerced scalar or the original value."""
    if annotation is None or (value is None and default is None):
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
