"""The backend's switches, read from config.pbtxt `parameters` (keys compatible with the official backend)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from backend.errors import ConfigError

_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off", ""}


def parse_bool(name: str, value: str) -> bool:
    """Like the official backend "true" turns a switch on; a typo is an error rather than a silent "off"."""
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConfigError(
        f"config.pbtxt parameter {name}: {value!r} is not a boolean; use \"true\" or \"false\""
    )


def config_parameters(model_config: dict[str, Any]) -> dict[str, str]:
    """`parameters { key: "X" value: { string_value: "Y" } }` as a plain dict."""
    return {
        key: entry.get("string_value", "")
        for key, entry in model_config.get("parameters", {}).items()
    }


@dataclass(frozen=True)
class BackendSettings:
    """Everything config.pbtxt can switch. Health-monitor settings live in `health.settings`."""

    report_custom_metrics: bool = False

    @classmethod
    def from_model_config(cls, model_config: dict[str, Any]) -> BackendSettings:
        params = config_parameters(model_config)
        return cls(
            report_custom_metrics=parse_bool(
                "REPORT_CUSTOM_METRICS", params.get("REPORT_CUSTOM_METRICS", "false")
            ),
        )
