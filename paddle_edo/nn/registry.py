"""Maps ``embedding.type`` names to layer classes, so configs pick any layer by name; ``TableSpec`` is
what an ``embedding`` section says, validated, passed to whatever builds tables."""
from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, TYPE_CHECKING

import paddle
from paddle.utils import unique_name

from ..budget import device_budget, parse_bytes
from ..errors import EdoDeprecationWarning, EdoValueError
from ..schema import ConfigError, Option, check_section
from .remote_table import RemoteTable
from .shards import RowShare, ShareRule, TableShare, building_share, share_rule

if TYPE_CHECKING:
    from .base import EmbeddingBase

EMBEDDINGS: dict[str, type] = {}

COMMON_OPTIONS: dict[str, Option] = {
    "type": Option("dense", str, doc="registered layer name"),
    "dim": Option(16, int, low=1, doc="embedding dimension"),
    "sparse": Option(True, bool, doc="sparse row gradients"),
    "min_rows": Option(0, int, low=0, doc="tables with fewer rows stay dense fp32 (small fields gain nothing)"),
    "collection": Option(True, bool, doc="models look all their tables up through one EmbeddingCollection (fp32 "
                                         "tables in one native op, trained in its backward); false: one layer call "
                                         "per table"),
    "tables": Option({}, dict, doc="sections of single tables by the names the memory report gives them "
                                   "(embeddings.item_id, first_order.item_id): a type and its keys, where a table "
                                   "differs from this section (tools/plan.py writes them)"),
}
AUTO = "auto"  # embedding.type chosen per table by the planner for a memory budget
AUTO_OPTIONS: dict[str, Option] = {
    "budget": Option(None, (int, str), nullable=True, doc="bytes the trained tables may hold: 2000000, '2GiB', '512MB'"),
    "device_memory": Option(None, (int, str), nullable=True, doc="or: the device's memory, of which the tables may "
                                                                 "take what the reserve leaves"),
    "reserve": Option(0.3, (float, str), doc="share (or size) of device_memory kept for everything else"),
    "methods": Option(None, list, item_kind=str, nullable=True, doc="the methods the planner may choose "
                                                                    "(default: all; see paddle_edo.planner)"),
    "budget_for": Option("serving", str, choices=("serving", "training"),
                         doc="what the budget holds: the trained tables (serving), or training's tables, their "
                             "optimizer state and a step's row gradients (the plan picks the table rule's state too)"),
}
TABLE_KEYS_FIXED = ("dim", "sparse", "tables", "collection")  # one width, gradient kind and lookup for all tables
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


def table_classes(section: Mapping[str, Any]) -> list[type]:
    """The layer classes a validated ``embedding`` section builds: its type's (unless 'auto') and those of
    its single tables' sections."""
    tables = section.get("tables") or {}
    names = ([] if section["type"] == AUTO else [section["type"]]) + [t["type"] for t in tables.values()]
    return [EMBEDDINGS[name] for name in dict.fromkeys(names)]


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
    if type_name == AUTO:
        section = check_section(path, values, {**COMMON_OPTIONS, **AUTO_OPTIONS})
        if (section["budget"] is None) == (section["device_memory"] is None):
            raise ConfigError(f"{path}.type = 'auto' needs one of {path}.budget (bytes the tables may hold) or "
                              f"{path}.device_memory (with {path}.reserve)")
        if section["budget"] is not None:
            parse_bytes(section["budget"], f"{path}.budget")
        else:
            device_budget(section["device_memory"], section["reserve"], (f"{path}.device_memory", f"{path}.reserve"))
    else:
        cls = embedding_class(type_name, f"{path}.type")
        section = check_section(path, values, {**COMMON_OPTIONS, **cls.config_options})
    section["tables"] = {name: check_table_section(f"{path}.tables.{name}", entry, section)
                         for name, entry in section["tables"].items()}
    return section


def check_table_section(path: str, entry: Any, parent: dict[str, Any]) -> dict[str, Any]:
    """One table's section, validated: a registered type and its keys (the width and gradient kind are the
    parent's, and left out)."""
    if not isinstance(entry, dict):
        raise ConfigError(f"{path} = {entry!r} must be a mapping: a type and its keys")
    fixed = [key for key in TABLE_KEYS_FIXED if key in entry]
    if fixed:
        raise ConfigError(f"{path}.{fixed[0]}: a single table cannot set it; every table of a model shares the "
                          f"embedding section's {', '.join(TABLE_KEYS_FIXED[:2])}")
    section = check_embedding_section(path, {**entry, "dim": parent["dim"], "sparse": parent["sparse"],
                                             "collection": parent["collection"]})
    return {key: value for key, value in section.items() if key not in TABLE_KEYS_FIXED}


@dataclass(frozen=True)
class TableSpec:
    """A validated ``embedding`` section: the table type, its width, its gradient kind, the row count
    under which a field stays dense fp32, and the type's own options."""

    type: str = "dense"
    dim: int = 16
    sparse: bool = True
    min_rows: int = 0
    collection: bool = True
    options: Mapping[str, Any] = field(default_factory=dict)
    tables: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # single tables' own sections

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
                "collection": self.collection, **self.options, "tables": {name: dict(entry) for name, entry in self.tables.items()}}

    def with_dim(self, dim: int) -> "TableSpec":
        return TableSpec(self.type, dim, self.sparse, self.min_rows, self.collection, dict(self.options),
                         dict(self.tables))

    def for_table(self, name: str) -> "TableSpec":
        """The spec of the model's table ``name``: its own section under ``tables`` (at this width), or
        this spec."""
        if name not in self.tables:
            return TableSpec(self.type, self.dim, self.sparse, self.min_rows, self.collection, dict(self.options))
        return TableSpec.from_section({**self.tables[name], "dim": self.dim, "sparse": self.sparse,
                                       "collection": self.collection}, f"embedding.tables.{name}")

    def check_table_names(self, names: list[str], owner: str) -> None:
        """Refuse sections under ``tables`` for tables the model does not have."""
        unknown = sorted(set(self.tables) - set(names))
        if unknown:
            raise ConfigError(f"embedding.tables.{unknown[0]}: {owner} has no table of that name; its tables: "
                              f"{', '.join(names)}")

    def build(self, num_embeddings: int, padding_idx: int | None = None, frequencies: Any = None
              ) -> "EmbeddingBase":
        """The layer for a table of ``num_embeddings`` ids; ``frequencies`` (a count per id) reaches the
        layers that need them. Tables under ``min_rows`` rows are dense fp32. Inside ``shards.row_shares``, a
        large table is built by its placement: as the rank's share of its rows (``layer.row_share``), whole
        on one rank (``layer.table_share``; a ``RemoteTable`` on the others), or whole on every rank with a
        dense gradient."""
        if self.type == AUTO:
            raise ConfigError("embedding.type = 'auto' is chosen table by table by the planner before a model is "
                              "built: train with tools/train.py (which plans first), or plan with tools/plan.py "
                              "or paddle_edo.planner.plan_tables")
        spec = self if num_embeddings >= self.min_rows else TableSpec(dim=self.dim, sparse=self.sparse,
                                                                      collection=self.collection)
        spec = TableSpec.from_section({**spec.section(), "tables": {}})  # the defaults of the chosen type
        cls = EMBEDDINGS[spec.type]
        options = spec.section()
        rule = share_rule()
        if rule is not None and num_embeddings >= rule.min_rows:
            if rule.by_rows(cls.row_shardable):
                return _row_share(cls, num_embeddings, options, padding_idx, rule)
            if rule.by_table(cls.row_shardable):
                return _whole_on_one_rank(cls, num_embeddings, options, padding_idx, frequencies, rule)
        if rule is not None:
            options = {**options, "sparse": False}  # replicated: its dense gradient is all-reduced
        return _built(cls, num_embeddings, options, padding_idx, frequencies)


def _built(cls: type, num_embeddings: int, options: dict[str, Any], padding_idx: int | None, frequencies: Any
           ) -> "EmbeddingBase":
    if cls.needs_frequencies:
        return cls.from_config(num_embeddings, options, padding_idx=padding_idx, frequencies=frequencies)
    return cls.from_config(num_embeddings, options, padding_idx=padding_idx)


def _row_share(cls: type, num_embeddings: int, options: dict[str, Any], padding_idx: int | None, rule: ShareRule
               ) -> "EmbeddingBase":
    """The rank's share of a table's rows (see ``shards``)."""
    share = RowShare(rule.rank, rule.world_size, num_embeddings, padding_idx)
    if share.held_rows == 0:
        raise ConfigError(f"a table of {num_embeddings} rows cannot be shared by {rule.world_size} ranks "
                          f"(rank {rule.rank} would hold none): raise distributed.shard_min_rows above "
                          f"{num_embeddings} to replicate it")
    owned_padding = padding_idx // rule.world_size \
        if padding_idx is not None and padding_idx % rule.world_size == rule.rank else None
    with building_share(share):  # the padding row, zero, is on its owner (and never looked up)
        layer = cls.from_config(share.held_rows, options, padding_idx=owned_padding)
    layer.row_share = share
    return layer


def _whole_on_one_rank(cls: type, num_embeddings: int, options: dict[str, Any], padding_idx: int | None,
                       frequencies: Any, rule: ShareRule) -> "EmbeddingBase":
    """The table on its owner, a RemoteTable on the other ranks. Every rank draws one seed from Paddle's
    generator and the owner builds the table from it, its layers and parameters named by a generator of the
    table's own: the ranks' generators (of numbers and of names) stay in step, so the replicated layers built
    next start alike and are named alike, and the table starts, and is named, as with any number of ranks."""
    share = TableShare(rule.place_table(num_embeddings * options["dim"]), rule.rank, rule.world_size, num_embeddings)
    seed = int(paddle.randint(0, 2 ** 31 - 1, [1]).item())
    with unique_name.guard(f"placed{len(rule.owners) - 1}_"):
        if not share.held:
            return RemoteTable(num_embeddings, options["dim"], share, padding_idx=padding_idx, kind=cls.registry_name)
        with _seeded(seed):
            layer = _built(cls, num_embeddings, options, padding_idx, frequencies)
    layer.table_share = share
    return layer


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """Paddle's generator seeded with ``seed`` inside, put back as it was after."""
    state = paddle.get_rng_state()
    paddle.seed(seed)
    try:
        yield
    finally:
        paddle.set_rng_state(state)


def build_embedding(options: Mapping[str, Any] | TableSpec, num_embeddings: int, padding_idx: int | None = None,
                    frequencies: Any = None) -> "EmbeddingBase":
    """Build the layer an ``embedding`` config section (or a TableSpec) names, for a table of
    num_embeddings ids; ConfigError names a section key the type does not take or a bad value."""
    return TableSpec.from_section(options).build(num_embeddings, padding_idx, frequencies)
