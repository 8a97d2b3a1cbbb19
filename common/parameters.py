"""config.pbtxt `parameters`: reading them and parsing their values, for every room that has switches."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from typing import Any

from .errors import ConfigError

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


def parse_positive(name: str, value: str, kind: type = float, allow_zero: bool = False) -> Any:
    try:
        number = kind(value.strip())
    except ValueError:
        number = None
    if number is None or number != number or number == float("inf") or number < 0 or (number == 0 and not allow_zero):
        wanted = "a non-negative" if allow_zero else "a positive"
        raise ConfigError(f"config.pbtxt parameter {name}: {value!r} is not {wanted} {kind.__name__}")
    return number


def parse_choice(name: str, value: str, choices: tuple[str, ...]) -> str:
    lowered = value.strip().lower()
    if lowered not in choices:
        raise ConfigError(f"config.pbtxt parameter {name}: {value!r}; use {' or '.join(choices)}")
    return lowered


def config_parameters(model_config: dict[str, Any]) -> dict[str, str]:
    """`parameters { key: "X" value: { string_value: "Y" } }` as a plain dict."""
    return {
        key: entry.get("string_value", "")
        for key, entry in model_config.get("parameters", {}).items()
    }


def check_known_keys(params: Iterable[str], known: Iterable[str]) -> None:
    """A key nobody reads is a typo that would silently do nothing: fail the load and suggest the key meant."""
    known = sorted(set(known))
    for key in sorted(params):
        if key in known:
            continue
        close = difflib.get_close_matches(key.upper(), known, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}? " if close else ""
        raise ConfigError(f"config.pbtxt parameter {key}: unknown to the vllm backend; {hint}"
                          f"known keys: {', '.join(known)}")
