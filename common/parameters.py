"""config.pbtxt `parameters`: the base of every room's table of keys, and the sentences a bad value fails the load with.

Each room declares its keys once, as the fields of a `ParameterTable` subclass (backend.settings,
health.settings): the key is the field's alias, its type and bounds are pydantic's, its default is the field's,
its meaning the description, and a rule across keys a model validator that raises `ConfigError`. pydantic parses
the strings Triton passes; its first error becomes the sentence the operator reads in the load failure, naming the
key and what is allowed (the messages predate the table and tests match them). The configuration reference's
table is generated from the same fields (`reference_rows`).
"""

from __future__ import annotations

import difflib
import enum
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from annotated_types import Ge, Gt, Le
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic.fields import FieldInfo

from .errors import ConfigError

_NUMBER_ERRORS = {"float_parsing", "float_type", "int_parsing", "int_type", "int_from_float", "greater_than",
                  "greater_than_equal", "finite_number"}


T = TypeVar("T", bound="ParameterTable")


def _switch_text(value: Any) -> Any:
    """An empty string_value is "off", as the official backend reads it."""
    return (value.strip() or "false") if isinstance(value, str) else value


def _choice_text(value: Any) -> Any:
    return value.strip().lower() if isinstance(value, str) else value


# A boolean key: true/false, 1/0, yes/no, on/off (pydantic's words), any case; anything else fails the load
# (the official backend silently reads a typo as "off").
Switch = Annotated[bool, BeforeValidator(_switch_text)]


def _auto_text(value: Any) -> Any:
    return None if isinstance(value, str) and value.strip().lower() == "auto" else value


# A number key that also takes `auto` (any case), read as None: the backend decides as it runs.
AutoOr = BeforeValidator(_auto_text)


def choice(kind: type) -> Any:
    """A key taking one of an enum's or a Literal's values, in any case."""
    return Annotated[kind, BeforeValidator(_choice_text)]


def seconds(default: float, key: str, meaning: str, *, zero_allowed: bool = False) -> Any:
    """A duration key: a finite number of seconds, above zero (or from zero, where `0` means "at once")."""
    bound = {"ge": 0} if zero_allowed else {"gt": 0}
    return Field(default, alias=key, allow_inf_nan=False, description=meaning, **bound)


class ParameterTable(BaseModel):
    """The keys one room reads; frozen like the settings it replaces. Built by name in tests and code, by key
    (alias) from config.pbtxt."""

    # populate_by_name: every pydantic 2 that the supported vLLM releases bring accepts it
    model_config = ConfigDict(frozen=True, populate_by_name=True, extra="ignore")

    @classmethod
    def from_params(cls: type[T], params: Mapping[str, str], **context: Any) -> T:
        """The room's settings from the parameters it reads (others are ignored: `check_known_keys` judges those);
        `context` carries facts from outside config.pbtxt that a rule needs (the server's model control mode)."""
        try:
            return cls.model_validate(dict(params), context=context)
        except ValidationError as exc:
            raise ConfigError(cls._sentence(exc.errors(include_url=False)[0])) from None

    @classmethod
    def from_model_config(cls: type[T], model_config: dict[str, Any], **context: Any) -> T:
        return cls.from_params(config_parameters(model_config), **context)

    @classmethod
    def keys(cls) -> frozenset[str]:
        return frozenset(_key(name, field) for name, field in cls.model_fields.items())

    @classmethod
    def field_for(cls, key: str) -> FieldInfo:
        return next(field for name, field in cls.model_fields.items() if _key(name, field) == key)

    @classmethod
    def _sentence(cls, error: Mapping[str, Any]) -> str:
        key, value, kind = str(error["loc"][0]), error["input"], error["type"]
        field = cls.field_for(key)
        if kind == "bool_parsing":
            return f"config.pbtxt parameter {key}: {value!r} is not a boolean; use \"true\" or \"false\""
        if kind in ("enum", "literal_error"):
            return f"config.pbtxt parameter {key}: {value!r}; use {_either(_choices(field.annotation))}"
        if kind == "less_than_equal":
            why = (field.json_schema_extra or {}).get("bound_reason")
            return (f"config.pbtxt parameter {key} must be at most {error['ctx']['le']:g} (got {value})"
                    + (f": {why}" if why else ""))
        if kind in _NUMBER_ERRORS:
            wanted = "a non-negative" if _bound(field, Ge) == 0 else "a positive"
            auto = ' or "auto"' if _takes_auto(field) else ""
            return (f"config.pbtxt parameter {key}: {value!r} is not {wanted} "
                    f"{_base_type(field.annotation).__name__}{auto}")
        return f"config.pbtxt parameter {key}: {value!r}: {error['msg']}"

    @classmethod
    def reference_rows(cls) -> list[ParameterRow]:
        return [ParameterRow(_key(name, field), _type_text(field), _default_text(field.default, field),
                             field.description or "") for name, field in cls.model_fields.items()]


@dataclass(frozen=True)
class ParameterRow:
    """One line of the configuration reference's table."""

    key: str
    type: str
    default: str
    meaning: str


def _key(name: str, field: FieldInfo) -> str:
    return field.alias or name


def _base_type(annotation: Any) -> Any:
    """`float` of `float`, `bool` of `Annotated[bool, ...]`, the enum of an Optional enum."""
    while typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        return _base_type(args[0])
    return annotation


def _choices(annotation: Any) -> list[str]:
    base = _base_type(annotation)
    if typing.get_origin(base) is Literal:
        return [str(a) for a in typing.get_args(base)]
    return [member.value for member in base]


def _either(words: list[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


def _bound(field: FieldInfo, kind: type) -> Any:
    found = [m for m in field.metadata if isinstance(m, kind)]
    return getattr(found[0], kind.__name__.lower()) if found else None


def _takes_auto(field: FieldInfo) -> bool:
    return AutoOr in field.metadata


def _type_text(field: FieldInfo) -> str:
    if _takes_auto(field):
        return f"`auto` or {_number_text(field)}"
    base = _base_type(field.annotation)
    if base is bool:
        return "boolean"
    if typing.get_origin(base) is Literal or (isinstance(base, type) and issubclass(base, enum.Enum)):
        return " \\| ".join(f"`{c}`" for c in _choices(base))
    if base in (int, float):
        return _number_text(field)
    return (field.json_schema_extra or {}).get("type_text", "text")


def _number_text(field: FieldInfo) -> str:
    base = _base_type(field.annotation)
    word = "integer" if base is int else "seconds" if (field.alias or "").endswith("_S") else "number"
    low, low_open, high = _bound(field, Ge), _bound(field, Gt), _bound(field, Le)
    if low_open == 0 and base is int:
        return f"{word}, 1–{high}" if high is not None else f"{word}, ≥ 1"
    return f"{word}, {'≥ ' + format(low, 'g') if low is not None else '> ' + format(low_open, 'g')}" \
        if low is not None or low_open is not None else word


def _default_text(default: Any, field: FieldInfo) -> str:
    if default is None:
        return "`auto`" if _takes_auto(field) else "—"
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    if isinstance(default, enum.Enum):
        return f"`{default.value}`"
    return f"`{default:g}`" if isinstance(default, float) else f"`{default}`"


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
