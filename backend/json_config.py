"""Reading a JSON object from a model's configuration file, with load errors that name the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..common.errors import ConfigError


def load_json_object(path: Path, what: str) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{path}: must be a JSON object of {what}, got {type(value).__name__}")
    return value
