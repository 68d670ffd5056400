"""Maps ``embedding.type`` names to layer classes, so configs pick any layer by name."""
from __future__ import annotations

from typing import Any, Callable, TYPE_CHECKING

from ..errors import EdoValueError
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


def register_embedding(name: str) -> Callable[[type], type]:
    """Class decorator: make a layer available as ``embedding.type: <name>``."""
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


def embedding_class(type_name: Any, path: str = "embedding.type") -> type:
    if type_name not in EMBEDDINGS:
        raise ConfigError(f"{path} = {type_name!r} is not a registered embedding; "
                          f"expected one of {', '.join(repr(n) for n in sorted(EMBEDDINGS))}")
    return EMBEDDINGS[type_name]


def check_embedding_section(path: str, values: Any) -> dict[str, Any]:
    """Validate an ``embedding`` section: the common keys plus the chosen type's own keys."""
    values = dict(values or {})
    type_name = values.get("type", COMMON_OPTIONS["type"].default)
    cls = embedding_class(type_name, f"{path}.type")
    return check_section(path, values, {**COMMON_OPTIONS, **cls.config_options})


def build_embedding(options: dict[str, Any], num_embeddings: int, padding_idx: int | None = None,
                    frequencies: Any = None) -> "EmbeddingBase":
    """Build the layer an ``embedding`` config section names, for a table of num_embeddings rows;
    ``frequencies`` (a count per id) reaches the layers that need them."""
    options = check_embedding_section("embedding", options)
    if num_embeddings < options["min_rows"]:
        options = check_embedding_section("embedding", {k: options[k] for k in ("dim", "sparse")})
    cls = embedding_class(options["type"])
    if getattr(cls, "needs_frequencies", False):
        return cls.from_config(num_embeddings, options, padding_idx=padding_idx, frequencies=frequencies)
    return cls.from_config(num_embeddings, options, padding_idx=padding_idx)
