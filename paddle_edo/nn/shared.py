"""Fewer rows than ids: hashing (HashEmbedding) and the quotient-remainder trick (QREmbedding)."""
from __future__ import annotations

import numpy as np
import paddle

from ..errors import EdoValueError
from ..kernels import can_fuse, fused_ops
from ..schema import ConfigError, Option
from .base import INNER_STORAGE, CompositeEmbedding, is_count, part_attr
from .dense import DenseEmbedding
from .registry import register_embedding
from .signature import accepts_old_signature

_SHIFT = 2**32  # (a x + b) // 2^32: the high 32 bits of the 64-bit product
COMBINES = ("sum", "mean", "concat")     # HashEmbedding's, in the fused kernel's numbering
OPERATIONS = ("mult", "add", "concat")   # QREmbedding's, likewise


def hash_coefficients(num_hashes: int, seed: int) -> np.ndarray:
    """[num_hashes, 2] int64 from a fixed seed: an odd multiplier a and an offset b per hash."""
    rng = np.random.default_rng(seed)
    a = rng.integers(-(2**63), 2**63 - 1, size=num_hashes, dtype=np.int64) | 1
    b = rng.integers(-(2**63), 2**63 - 1, size=num_hashes, dtype=np.int64)
    return np.stack([a, b], axis=1)


def hash_ids_numpy(ids: np.ndarray, coefficients: np.ndarray, buckets: int) -> np.ndarray:
    """Reference of HashEmbedding's hash in numpy: [..., num_hashes] bucket ids."""
    x = np.asarray(ids, dtype=np.int64)[..., None]
    with np.errstate(over="ignore"):
        mixed = x * coefficients[:, 0] + coefficients[:, 1]  # wraps modulo 2^64, like Paddle's int64
    return (mixed >> 32) % buckets


def default_collisions(num_embeddings: int) -> int:
    """QREmbedding's m when none is given: ceil(sqrt(N)), so both tables have about sqrt(N) rows."""
    return int(np.ceil(np.sqrt(num_embeddings)))


def _old_hash_call(args: tuple, kwargs: dict) -> bool:
    """HashEmbedding's old signature began (num_buckets, embedding_dim, num_hashes, combine, ...): a call
    that gives no num_buckets, or a combine string in the fourth place, or more than five positional
    arguments."""
    return ("num_buckets" not in kwargs and len(args) < 3) or len(args) > 5 \
        or (len(args) >= 4 and isinstance(args[3], str))


def _refuse_concat_with_first_order(config: dict, key: str) -> None:
    """'concat' splits the width between tables; DeepFM's first-order tables are 1 wide."""
    if config["embedding"][key] == "concat" and config["model"]["first_order"]:
        raise ConfigError(f"embedding.{key} = 'concat' splits each row between tables, but model.first_order "
                          f"tables are 1 wide; use another embedding.{key} or model.first_order=false")


def constant_buffer(layer: paddle.nn.Layer, name: str, value: np.ndarray) -> None:
    """An int64 constant the layer keeps: a buffer in dynamic graph. A static program (parameter-server
    training builds one) cannot register it, nor initialise an int64 parameter; there it is an assign op's
    output, listed in ``layer.static_constants`` for whoever saves the layer's state."""
    if paddle.in_dynamic_mode():
        layer.register_buffer(name, paddle.to_tensor(value))
        return
    constant = paddle.assign(value)
    object.__setattr__(layer, name, constant)
    layer.__dict__.setdefault("static_constants", {})[name] = constant


@register_embedding("hash")
class HashEmbedding(CompositeEmbedding):
    """Any int64 id -> ``num_hashes`` rows of a ``num_buckets``-row table, combined (sum, mean, concat).

    ``num_embeddings`` is the number of ids the table stands for (a field's vocabulary, as for every
    table; configs derive ``num_buckets`` from it), but any int64 id is hashed: ids are not range-checked.

    Lookups: int32 / int64 ids ``[...]`` (any value) -> float32 ``[..., embedding_dim]``; EdoValueError names
    a bad ``num_buckets``, ``num_hashes`` or ``combine``.

    The hashes are multiply-shift hashes (Dietzfelbinger et al.: the high 32 bits of a x + b modulo
    2^64, a odd; a and b from a fixed seed), reduced modulo num_buckets, computed with Paddle int64 ops,
    so dygraph, static graph and Paddle Inference agree. Unbounded id spaces need no vocabulary; ids are
    not range-checked.
    """

    takes_any_id = True  # no vocabulary: monitors need the id space from elsewhere to count coverage

    config_options = {
        "num_buckets": Option(None, int, low=1, nullable=True, doc="rows of the shared table (default: by fraction)"),
        "bucket_fraction": Option(0.1, float, low=1e-9, high=1.0, doc="num_buckets = fraction x rows when unset"),
        "num_hashes": Option(2, int, low=1, high=8),
        "combine": Option("sum", str, choices=COMBINES),
        "seed": Option(0, int, low=0),
        "storage_format": INNER_STORAGE,
    }

    @accepts_old_signature(("num_buckets", "embedding_dim", "num_hashes", "combine", "padding_idx", "sparse", "seed",
                            "init_std"), is_old=_old_hash_call,
                           adapt=lambda named: {"num_embeddings": named["num_buckets"], **named})
    def __init__(self, num_embeddings: int, embedding_dim: int, num_buckets: int, num_hashes: int = 2,
                 combine: str = "sum", *, padding_idx: int | None = None, sparse: bool = True,
                 weight_attr: paddle.ParamAttr | None = None, name: str | None = None, seed: int = 0,
                 init_std: float = 0.01, storage_format: str = "fp32") -> None:
        label = type(self).__name__
        if combine not in COMBINES:
            raise EdoValueError(f"{label}: combine = {combine!r}; expected 'sum', 'mean' or 'concat'")
        for arg, value in (("num_buckets", num_buckets), ("num_hashes", num_hashes)):
            if not is_count(value):
                raise EdoValueError(f"{label}: {arg} = {value!r} must be an integer >= 1")
        if combine == "concat" and embedding_dim % num_hashes:
            raise EdoValueError(f"{label}: combine 'concat' needs embedding_dim ({embedding_dim}) divisible by "
                                f"num_hashes ({num_hashes})")
        super().__init__(num_embeddings, embedding_dim, sparse=sparse, name=name, range_check=False)
        self.padding_idx = padding_idx  # an id, not a row: any int64 may be the padding id
        self.num_buckets, self.num_hashes, self.combine, self.seed = int(num_buckets), int(num_hashes), combine, seed
        width = embedding_dim // num_hashes if combine == "concat" else embedding_dim
        self.table = DenseEmbedding(num_buckets, width, sparse=sparse, weight_attr=weight_attr, init_std=init_std)
        constant_buffer(self, "coefficients", hash_coefficients(num_hashes, seed))
        # int64 constants live in tensors: to_static stores Python scalars as float32 (2^31 - 1 became 2^31)
        constant_buffer(self, "buckets", np.array([num_buckets], dtype=np.int64))
        self.keep_inner_tables_as(storage_format)

    @classmethod
    def from_config(cls, num_embeddings, options, padding_idx=None):
        buckets = options["num_buckets"] or max(1, int(round(options["bucket_fraction"] * num_embeddings)))
        return cls(num_embeddings, options["dim"], buckets, options["num_hashes"], options["combine"],
                   padding_idx=padding_idx, sparse=options["sparse"], seed=options["seed"],
                   storage_format=options.get("storage_format", "fp32"))

    @classmethod
    def check_config(cls, config):
        _refuse_concat_with_first_order(config, "combine")

    def check_ids(self, ids: paddle.Tensor) -> None:
        self.check_id_dtype(ids)  # any int64 value is an id

    def bucket_ids(self, ids: paddle.Tensor) -> paddle.Tensor:
        """[..., num_hashes] rows of the shared table for each id."""
        mixed = ids.astype("int64").unsqueeze(-1) * self.coefficients[:, 0] + self.coefficients[:, 1]
        return paddle.remainder(mixed // _SHIFT, self.buckets)  # 2^32 is exact even as a float32 constant

    def lookup(self, ids: paddle.Tensor) -> paddle.Tensor:
        if type(self.table) is DenseEmbedding and can_fuse(ids, self.table.weight):
            return fused_ops().edo_hash_lookup(ids.astype("int64"), self.coefficients, self.table.weight,
                                               self.table.num_embeddings, COMBINES.index(self.combine),
                                               self.padding_idx is not None, self.padding_idx or 0)
        buckets = self.bucket_ids(ids)
        if self.combine == "concat":
            out = self.table(buckets).flatten(start_axis=-2)
        else:
            # one lookup per hash, added: Paddle's CPU sum over the middle axis of [..., hashes, dim]
            # measured 42 ms against 14 ms for the adds (4096 x 26 ids, dim 64)
            out = paddle.add_n(self.table.lookup_columns(buckets))
            if self.combine == "mean":
                out = out * (1.0 / self.num_hashes)  # the fused kernel's arithmetic on every Paddle
        return self.zero_padding(ids, out)


@register_embedding("qr")
class QREmbedding(CompositeEmbedding):
    """Quotient-remainder embedding (Shi et al. 2020): id -> (id // m, id % m), two small tables whose
    rows are combined (``mult``, ``add`` or ``concat``), so every id keeps a unique vector with tables of
    about 2 sqrt(N) rows when m ~ sqrt(N). Lookups, dtypes and errors: the EmbeddingBase contract
    (EdoValueError names a bad ``num_collisions`` or ``operation``)."""

    config_options = {
        "num_collisions": Option(None, int, low=1, nullable=True, doc="m; default: ceil(sqrt(rows))"),
        "operation": Option("mult", str, choices=OPERATIONS),
        "storage_format": INNER_STORAGE,
    }

    @accepts_old_signature(("num_embeddings", "embedding_dim", "num_collisions", "operation", "padding_idx", "sparse",
                            "init_std"))
    def __init__(self, num_embeddings: int, embedding_dim: int, num_collisions: int | None = None,
                 operation: str = "mult", *, padding_idx: int | None = None, sparse: bool = True,
                 weight_attr: paddle.ParamAttr | None = None, name: str | None = None, init_std: float = 0.01,
                 storage_format: str = "fp32") -> None:
        label = type(self).__name__
        if num_collisions is None:
            num_collisions = default_collisions(num_embeddings)
        if not is_count(num_collisions):
            raise EdoValueError(f"{label}: num_collisions = {num_collisions!r} must be an integer >= 1 or None")
        if operation not in OPERATIONS:
            raise EdoValueError(f"{label}: operation = {operation!r}; expected 'mult', 'add' or 'concat'")
        if operation == "concat" and embedding_dim % 2:
            raise EdoValueError(f"{label}: operation 'concat' needs an even embedding_dim, got {embedding_dim}")
        super().__init__(num_embeddings, embedding_dim, padding_idx=padding_idx, sparse=sparse, name=name)
        self.num_collisions, self.operation = int(num_collisions), operation
        # an int64 tensor, not a Python scalar: to_static would store the scalar as float32
        constant_buffer(self, "collisions", np.array([num_collisions], dtype=np.int64))
        width = embedding_dim // 2 if operation == "concat" else embedding_dim
        # mult starts near 1 x small so products are not vanishingly small
        self.quotient = DenseEmbedding(-(-num_embeddings // num_collisions), width, sparse=sparse,
                                       weight_attr=part_attr(weight_attr, "quotient"),
                                       init_std=1.0 if operation == "mult" else init_std)
        self.remainder = DenseEmbedding(num_collisions, width, sparse=sparse,
                                        weight_attr=part_attr(weight_attr, "remainder"), init_std=init_std)
        self.keep_inner_tables_as(storage_format)

    @classmethod
    def check_config(cls, config):
        _refuse_concat_with_first_order(config, "operation")

    @classmethod
    def from_config(cls, num_embeddings, options, padding_idx=None):
        return cls(num_embeddings, options["dim"], options["num_collisions"], options["operation"],
                   padding_idx=padding_idx, sparse=options["sparse"],
                   storage_format=options.get("storage_format", "fp32"))

    def lookup(self, ids: paddle.Tensor) -> paddle.Tensor:
        ids = ids.astype("int64")
        tables = (self.quotient, self.remainder)
        if all(type(t) is DenseEmbedding for t in tables) and can_fuse(ids, *(t.weight for t in tables)):
            return fused_ops().edo_qr_lookup(ids, self.quotient.weight, self.remainder.weight, self.num_collisions,
                                             OPERATIONS.index(self.operation), self.padding_idx is not None,
                                             self.padding_idx or 0)
        q, r = self.quotient(ids // self.collisions), self.remainder(paddle.remainder(ids, self.collisions))
        if self.operation == "mult":
            out = q * r
        elif self.operation == "add":
            out = q + r
        else:
            out = paddle.concat([q, r], axis=-1)
        return self.zero_padding(ids, out)
