"""What each column of a user's table becomes: categorical columns -> id fields, numeric columns -> dense
features (or bucket ids), the label column (or a rule over one) -> 0/1; read from the ``data.files`` section."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..schema import ConfigError, Option, value_repr

ID_SOURCES = ("vocabulary", "hash", "given")
TRANSFORMS = ("none", "log1p", "standardize", "bucketize")

CATEGORICAL_OPTIONS: dict[str, Option] = {
    "ids": Option(None, str, choices=ID_SOURCES, nullable=True,
                  doc="vocabulary (built on the training split), hash (a stable 64-bit hash of the raw value) or "
                      "given (the cells are integer ids below num_embeddings); default: data.files.ids"),
    "min_count": Option(None, int, low=1, nullable=True, doc="training-split count a value needs for its own id"),
    "max_size": Option(None, int, low=2, nullable=True, doc="most ids, the unknown id 0 included"),
    "separator": Option(None, str, nullable=True, doc="a cell holds several values joined by this"),
    "max_values": Option(None, int, low=1, nullable=True, doc="values kept from a multi-valued cell"),
    "num_embeddings": Option(None, int, low=2, nullable=True,
                             doc="ids the field stands for: the bound of given ids; a hashed field's table size "
                                 "(default: the distinct values counted on the training split)"),
}
NUMERIC_OPTIONS: dict[str, Option] = {
    "transform": Option(None, str, choices=TRANSFORMS, nullable=True, doc="default: data.files.numeric_transform"),
    "num_buckets": Option(None, int, low=2, nullable=True,
                          doc="bucketize: quantile buckets of the training split (default: data.files.num_buckets)"),
    "fill": Option(None, float, nullable=True, doc="value of a missing cell after the transform (default 0)"),
}

_NUMBER = r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*"
_RULE = re.compile(r"^\s*([^\s=!<>]+)\s*(==|!=|>=|<=|>|<)\s*(\S.*?)\s*$")
_COMPARISONS = {"==": pc.equal, "!=": pc.not_equal, ">=": pc.greater_equal, "<=": pc.less_equal,
                ">": pc.greater, "<": pc.less}


@dataclass(frozen=True)
class CategoricalColumn:
    """A column whose values become ids of one field (id 0: missing, unknown or rare)."""

    name: str
    ids: str = "vocabulary"
    min_count: int = 1
    max_size: int | None = None
    separator: str | None = None
    max_values: int = 16
    num_embeddings: int | None = None

    @property
    def multi_valued(self) -> bool:
        return self.separator is not None


@dataclass(frozen=True)
class NumericColumn:
    """A column of numbers: a dense feature after its transform, or a field of bucket ids."""

    name: str
    transform: str = "log1p"
    num_buckets: int = 16
    fill: float = 0.0

    @property
    def bucketized(self) -> bool:
        return self.transform == "bucketize"


@dataclass(frozen=True)
class LabelRule:
    """The 0/1 label: a column of 0/1 values, or ``column op value`` (``rating >= 4``, ``income == '>50K'``)."""

    column: str
    operator: str | None = None
    value: str | float | None = None

    @classmethod
    def parse(cls, text: str, path: str = "data.files.label") -> "LabelRule":
        match = _RULE.match(text)
        if match is None:
            if not text.strip() or any(c in text for c in "=!<>"):
                raise ConfigError(f"{path} = {text!r} must be a column of 0/1 labels or a rule 'column op value' "
                                  f"with op one of {', '.join(_COMPARISONS)}")
            return cls(text.strip())
        column, operator, value = match.groups()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            return cls(column, operator, value[1:-1])
        if re.fullmatch(_NUMBER, value):
            return cls(column, operator, float(value))
        if operator not in ("==", "!="):
            raise ConfigError(f"{path} = {text!r}: {value!r} is not a number; quote a string value "
                              f"(only == and != compare strings)")
        return cls(column, operator, value)

    def apply(self, values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
        """(labels float32 [N], bad rows bool [N]): a missing cell, or a plain label other than 0 or 1, is bad."""
        missing = np.asarray(values.is_null())
        if self.operator is None:
            numbers, bad = to_numbers(values)
            bad |= missing | ~np.isin(numbers, (0.0, 1.0))
            return np.where(bad, 0.0, numbers).astype(np.float32), bad
        if isinstance(self.value, float):
            numbers, bad = to_numbers(values)
            compare = _COMPARISONS[self.operator](pa.array(numbers), pa.scalar(self.value))
            bad |= missing
        else:
            text = values if pa.types.is_string(values.type) else pc.cast(values, pa.string())
            compare = _COMPARISONS[self.operator](pc.utf8_trim_whitespace(text), pa.scalar(self.value))
        labels = np.asarray(pc.fill_null(compare, False)).astype(np.float32)
        return labels, missing

    def describe(self) -> str:
        if self.operator is None:
            return f"column {self.column!r} (0 or 1)"
        return f"rule {self.column} {self.operator} {self.value!r}"


def to_numbers(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(float64 [N] with NaN for missing cells, bad bool [N]: a cell that is not a number)."""
    if pa.types.is_string(values.type) or pa.types.is_large_string(values.type):
        try:  # Arrow's parser first; the cells are checked one by one only when it refuses some
            parsed = pc.cast(values, pa.float64())
            return np.asarray(pc.fill_null(parsed, np.nan)), np.zeros(len(values), dtype=bool)
        except pa.ArrowInvalid:
            pass
        trimmed = pc.utf8_trim_whitespace(values)
        empty = pc.equal(trimmed, "")
        good = pc.or_(pc.match_substring_regex(trimmed, f"^{_NUMBER}$"), empty)
        bad = ~np.asarray(pc.fill_null(good, True))
        cleaned = pc.if_else(pc.or_kleene(pc.invert(good), empty), pa.scalar(None, pa.string()), trimmed)
        values = pc.cast(cleaned, pa.float64())
    elif not pa.types.is_floating(values.type):
        values = pc.cast(values, pa.float64())
        bad = np.zeros(len(values), dtype=bool)
    else:
        bad = np.zeros(len(values), dtype=bool)
    return np.asarray(pc.fill_null(values.cast(pa.float64()), np.nan)), bad


def _column_options(path: str, entries: Any, options: dict[str, Option]) -> dict[str, dict[str, Any]]:
    """Column name -> its own settings, from a list of names or a mapping name -> settings (or null)."""
    if isinstance(entries, list):
        entries = {name: None for name in entries}
    if not isinstance(entries, dict):
        raise ConfigError(f"{path} = {value_repr(entries)} must be a list of column names or a mapping of "
                          f"column name -> settings")
    columns = {}
    for name, settings in entries.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{path}: column name {name!r} must be a non-empty string")
        settings = settings or {}
        if not isinstance(settings, dict):
            raise ConfigError(f"{path}.{name} = {value_repr(settings)} must be a mapping of settings "
                              f"({', '.join(options)}) or null")
        unknown = [k for k in settings if k not in options]
        if unknown:
            raise ConfigError(f"{path}.{name}.{unknown[0]}: unknown key; allowed: {', '.join(options)}")
        columns[name] = {k: options[k].check(f"{path}.{name}.{k}", settings.get(k)) for k in options}
    return columns


def categorical_columns(section: dict[str, Any], path: str = "data.files") -> list[CategoricalColumn]:
    """The section's categorical columns with its defaults filled in."""
    columns = []
    for name, own in _column_options(f"{path}.categorical", section["categorical"], CATEGORICAL_OPTIONS).items():
        ids = own["ids"] or section["ids"]
        ids = "vocabulary" if ids == "auto" else ids  # (config.validate resolves auto by the embedding type)
        if ids == "given" and own["num_embeddings"] is None:
            raise ConfigError(f"{path}.categorical.{name}.num_embeddings = null: given ids need their bound "
                              f"(ids lie in [0, num_embeddings))")
        columns.append(CategoricalColumn(
            name, ids, own["min_count"] or section["min_count"], own["max_size"] or section["max_size"],
            own["separator"], own["max_values"] or section["max_values"], own["num_embeddings"]))
    return columns


def numeric_columns(section: dict[str, Any], path: str = "data.files") -> list[NumericColumn]:
    """The section's numeric columns with its defaults filled in."""
    return [NumericColumn(name, own["transform"] or section["numeric_transform"],
                          own["num_buckets"] or section["num_buckets"], own["fill"] or 0.0)
            for name, own in _column_options(f"{path}.numeric", section["numeric"], NUMERIC_OPTIONS).items()]
