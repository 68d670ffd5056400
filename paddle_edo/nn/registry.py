"""Maps ``embedding.type`` names to layer classes, so configs pick any layer by name; ``TableSpec`` is
what an ``embedding`` section says, validated, passed to whatever builds tables."""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, TYPE_CHECKING

from ..errors import EdoDeprecationWarning, EdoValueError
from ..schema import ConfigError, Option, check_section

if TYPE_CHECKING:
    from .base import EmbeddingBase

EMBEDDINGS: dict[str, type] = {}

COMMON_OPTIONS: dict[str, Option] = {
    "type": Option("dense", str, doc="registered layer name"),
    "dim": Option(16, int, low=1, doc="embedding dimension"),
    "sparse": Option(True, bool, doc="sparse row gradients"),
    "min_rows": Option(0, int, low=0, doc="tables with fewer rows stay dense fp32 (small fields gain nothing)"),
}
RENAMED_KEYS = {"dtype": "storage_format"}  # old config spellings, accepted for one release


def register_embedding(name: str) -> Callable[[type], type]:
    """Class decorator: make a layer available under ``name`` (as ``embedding.type: <name>`` when the
    class is a ``field_table``)."""
    def wrap(cls: type) -> type:
        if name in EMBEDDINGS:
            raise EdoValueError(f"embedding type {name!r} is registered twice")
        overlap = set(cls.config_options) & set(COMMON_OPTIONS)
        if overlap:
            raise EdoValueError(f"{cls.__name__}.config_options redefines common keys {sorted(overlap)}")
        cls.registry_name = name
        EMBEDDINGS[name] = cls
        return cls
    return wrap


def field_tables() -> list[str]:
    """The names ``embedding.type`` accepts: layers that serve one id field."""
    return sorted(name for name, cls in EMBEDDINGS.items() if cls.field_table)


def embedding_class(type_name: Any, path: str = "embedding.type") -> type:
    if type_name not in field_tables():
        raise ConfigError(f"{path} = {type_name!r} is not a registered embedding; "
                          f"expected one of {', '.join(repr(n) for n in field_tables())}")
    return EMBEDDINGS[type_name]


def check_embedding_section(path: str, values: Any) -> dict[str, Any]:
    """Validate an ``embedding`` section: the common keys plus the chosen type's own keys (old spellings
    renamed, with a warning)."""
    values = dict(values or {})
    for old, new in RENAMED_KEYS.items():
        if old in values:
            if new in values:
                raise ConfigError(f"{path}.{old} is the old name of {path}.{new}; give only {path}.{new}")
            warnings.warn(f"{path}.{old} is now {path}.{new} (the old key goes in the next release)",
                          EdoDeprecationWarning, stacklevel=2)
            values[new] = values.pop(old)
    type_name = values.get("type", COMMON_OPTIONS["type"].default)
    cls = embedding_class(type_name, f"{path}.type")
    return check_section(path, values, {**COMMON_OPTIONS, **cls.config_options})


@dataclass(frozen=True)
class TableSpec:
    """A validated ``embedding`` section: the table type, its width, its gradient kind, the row count
    under which a field stays dense fp32, and the type's own options."""

    type: str = "dense"
    dim: int = 16
    sparse: bool = True
    min_rows: int = 0
    options: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_section(cls, values: Any, path: str = "embedding") -> "TableSpec":
        """From an ``embedding`` section as configs write it (flat keys), validated."""
        if isinstance(values, TableSpec):
            return values
        section = check_embedding_section(path, values)
        common = {k: section.pop(k) for k in COMMON_OPTIONS}
        return cls(**common, options=section)

    def section(self) -> dict[str, Any]:
        """The flat ``embedding`` section this spec stands for."""
        return {"type": self.type, "dim": self.dim, "sparse": self.sparse, "min_rows": self.min_rows,
                **self.options}

    def with_dim(self, dim: int) -> "TableSpec":
        return TableSpec(self.type, dim, self.sparse, self.min_rows, dict(self.options))

    def build(self, num_embeddings: int, padding_idx: int | None = None, frequencies: Any = None
              ) -> "EmbeddingBase":
        """The layer for a table of ``num_embeddings`` ids; ``frequencies`` (a count per id) reaches the
        layers that need them. Tables under ``min_rows`` rows are dense fp32."""
        spec = self if num_embeddings >= self.min_rows else TableSpec(dim=self.dim, sparse=self.sparse)
        spec = TableSpec.from_section(spec.section())  # the defaults of the chosen type
        cls = EMBEDDINGS[spec.type]
        options = spec.section()
        if cls.needs_frequencies:
            return cls.from_config(num_embeddings, options, padding_idx=padding_idx, frequencies=frequencies)
        return cls.from_config(num_embeddings, options, padding_idx=padding_idx)


def build_embedding(options: Mapping[str, Any] | TableSpec, num_embeddings: int, padding_idx: int | None = None,
                    frequencies: Any = None) -> "EmbeddingBase":
    """Build the layer an ``embedding`` config section (or a TableSpec) names, for a table of
    num_embeddings ids."""
    return TableSpec.from_section(options).build(num_embeddings, padding_idx, frequencies)
