"""Typed config options and the error they raise: one place that checks a value and says why."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .errors import EdoValueError

_TYPE_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
               list: "a list", dict: "a mapping"}


class ConfigError(EdoValueError):
    """A config value that cannot be used; the message names the key path, the value and what is allowed."""


@dataclass(frozen=True)
class Option:
    """One config key: its default, its type and the values it allows."""

    default: Any
    kind: type | tuple[type, ...]
    choices: tuple | None = None
    low: float | None = None
    high: float | None = None
    nullable: bool = False
    item_kind: type | None = None
    doc: str = ""

    def allowed(self) -> str:
        kinds = self.kind if isinstance(self.kind, tuple) else (self.kind,)
        text = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
        if self.item_kind is not None:
            text += f" of {_TYPE_NAMES[self.item_kind].split(' ', 1)[1]}s"
        if self.choices is not None:
            text = "one of " + ", ".join(repr(c) for c in self.choices)
        if self.low is not None and self.high is not None:
            text += f" in [{self.low}, {self.high}]"
        elif self.low is not None:
            text += f" >= {self.low}"
        elif self.high is not None:
            text += f" <= {self.high}"
        if self.nullable:
            text += " (or null)"
        return text

    def check(self, path: str, value: Any) -> Any:
        """Return the value (ints widened to float where a number is asked), or raise ConfigError."""
        if value is None:
            if self.nullable:
                return None
            raise ConfigError(f"{path} = null is not allowed; expected {self.allowed()}")
        coerced = _coerce(value, self.kind)
        if coerced is _BAD:
            raise ConfigError(f"{path} = {value_repr(value)} has the wrong type; expected {self.allowed()}")
        value = coerced
        if self.item_kind is not None:
            items = [_coerce(v, self.item_kind) for v in value]
            if any(v is _BAD for v in items):
                raise ConfigError(f"{path} = {value_repr(value)} has an item of the wrong type; "
                                  f"expected {self.allowed()}")
            value = items
        if self.choices is not None and value not in self.choices:
            raise ConfigError(f"{path} = {value_repr(value)} is not allowed; expected {self.allowed()}")
        numbers = value if isinstance(value, list) else [value]
        for number in numbers:
            if isinstance(number, (int, float)) and not isinstance(number, bool):
                if (self.low is not None and number < self.low) or (
                        self.high is not None and number > self.high):
                    raise ConfigError(f"{path} = {value_repr(value)} is out of range; expected {self.allowed()}")
        return value


# PyYAML follows YAML 1.1, which reads 1e-3 (no dot) as a string; a number is meant.
_YAML11_MISSED_FLOAT = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


class _Bad:
    pass


_BAD = _Bad()


def _coerce(value: Any, kind: type | tuple[type, ...]) -> Any:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    for k in kinds:
        if k is bool:
            if isinstance(value, bool):
                return value
        elif k is int:
            if isinstance(value, int) and not isinstance(value, bool):
                return value
        elif k is float:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return float(value)
            if isinstance(value, str) and _YAML11_MISSED_FLOAT.fullmatch(value.strip()):
                return float(value)
        elif isinstance(value, k):
            return value
    return _BAD


def value_repr(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_section(path: str, values: Any, options: dict[str, Any]) -> dict[str, Any]:
    """Validate a mapping against options (Option or nested dict of them); fill defaults."""
    if values is None:
        values = {}
    if not isinstance(values, dict):
        raise ConfigError(f"{path} = {value_repr(values)} must be a mapping with keys: {', '.join(options)}")
    unknown = [k for k in values if k not in options]
    if unknown:
        raise ConfigError(f"{path}.{unknown[0]}: unknown key; allowed keys in {path}: {', '.join(options)}")
    checked = {}
    for key, option in options.items():
        sub = f"{path}.{key}"
        if isinstance(option, dict):
            checked[key] = check_section(sub, values.get(key), option)
        else:
            checked[key] = option.check(sub, values[key]) if key in values else _copy(option.default)
    return checked


def _copy(value: Any) -> Any:
    if isinstance(value, list):
        return list(value)
    if isinstance(value, dict):
        return dict(value)
    return value
