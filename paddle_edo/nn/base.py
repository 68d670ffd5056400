"""What every paddle_edo embedding layer shares: id checks, sparse gradients by default, bytes held."""
from __future__ import annotations

import copy
from typing import Any, ClassVar

import numpy as np
import paddle
from paddle.base.initializer import _global_weight_initializer

from ..compat import dynamic_graph_under_sot
from ..errors import EdoIndexError, EdoTypeError, EdoValueError
from ..quant.formats import FORMATS
from ..schema import Option
from .initialization import fill_normal

ID_DTYPES = (paddle.int32, paddle.int64)
_INT64 = int(paddle.int64)
_ID_DTYPE_NUMBERS = frozenset(map(int, ID_DTYPES))  # compared as numbers: a dtype's == costs 1.5 us a call

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "int8": 1, "uint8": 1, "int32": 4, "int64": 8}


def int64_ids(ids: paddle.Tensor) -> paddle.Tensor:
    """Ids as int64, as the kernels take them: int64 ids as they are (a cast would copy them)."""
    return ids if int(ids.dtype) == _INT64 else ids.astype("int64")


@paddle.jit.not_to_static
def known_empty(ids: paddle.Tensor) -> bool:
    """Whether ``ids`` holds no ids by its shape: in dynamic graph, or traced into a program with a zero
    dimension (a whole-graph trace of an empty batch; a dimension left open is not known to be empty).
    Kept out of to_static's rewriting, which would turn the shape into a tensor."""
    return 0 in ids.shape


def dtype_name(dtype: Any) -> str:
    """'float32' for paddle.float32 and numpy's float32 alike."""
    return str(dtype).split(".")[-1].lower()


def table_settings(layer: paddle.nn.Layer) -> tuple[int | None, bool]:
    """(padding_idx, sparse) of a paddle_edo table or a ``paddle.nn.Embedding`` (which keeps them
    private and stores padding -1 for "none")."""
    padding = getattr(layer, "padding_idx", getattr(layer, "_padding_idx", None))
    padding = None if padding is None or padding < 0 else int(padding)
    return padding, bool(getattr(layer, "sparse", getattr(layer, "_sparse", True)))


def is_count(value: Any, low: int = 1) -> bool:
    """Whether ``value`` is an integer (numpy's too, not a bool) of at least ``low``: what a table's sizes
    and counts must be."""
    return not isinstance(value, bool) and isinstance(value, (int, np.integer)) and value >= low


def part_attr(weight_attr: paddle.ParamAttr | None, part: str) -> paddle.ParamAttr | None:
    """The ParamAttr of one inner table of a composite layer: the user's, with ``.<part>`` added to its
    name when it has one (two parameters may not share a name)."""
    if weight_attr is None or not weight_attr.name:
        return weight_attr
    attr = copy.copy(weight_attr)
    attr.name = f"{weight_attr.name}.{part}"
    return attr


class EmbeddingBase(paddle.nn.Layer):
    """Base of every embedding layer in paddle_edo, and the contract every table keeps:

    - ``forward(ids)``: ids int32 or int64 of any shape ``[...]`` -> float32 ``[..., embedding_dim]`` (a
      QuantizedEmbedding with ``output_dtype`` float16 / bfloat16 gives that dtype), the padding id's
      vector zero; an empty batch gives an empty output.
    - Errors: EdoTypeError for ids of another dtype; EdoIndexError naming the layer and the id for ids
      outside ``[0, num_embeddings)`` (checked in dynamic graph, where values are known; a hash table
      takes any id); EdoValueError naming the argument for a bad ``num_embeddings``, ``embedding_dim``
      or ``padding_idx`` (EdoTypeError for one of the wrong type).

    Subclasses implement ``lookup(ids)`` and ``estimated_bytes()``; the base checks ids and carries the
    metadata the memory report reads.
    """

    registry_name: ClassVar[str] = ""
    config_options: ClassVar[dict[str, Option]] = {}
    # capabilities: what configs, trainers and monitors may ask of a table type
    field_table: ClassVar[bool] = True         # serves one id field, built from an ``embedding`` config
    needs_frequencies: ClassVar[bool] = False  # built from the training frequencies of its ids
    takes_any_id: ClassVar[bool] = False       # any int64 is an id: no vocabulary, no range check
    remote_rows: ClassVar[bool] = False        # its rows live on parameter servers, not in the layer
    row_shardable: ClassVar[bool] = False      # id g is row g: a share of its rows is a table of this type (shards.py)
    packed: bool = True  # False: trains in a full form that pack() turns into the compact one
    report_note: str = ""  # why the table is as it is, when a config asked for something else (memory report)
    packing_error: float | None = None  # packed rows' mean relative L2 error against the trained ones

    def __init__(self, num_embeddings: int, embedding_dim: int, *, padding_idx: int | None = None,
                 sparse: bool = True, name: str | None = None, range_check: bool = True) -> None:
        super().__init__(name_scope=name)
        label = type(self).__name__
        for arg, value in (("num_embeddings", num_embeddings), ("embedding_dim", embedding_dim)):
            if not is_count(value):
                raise EdoValueError(f"{label}: {arg} = {value!r} must be an integer >= 1")
        if padding_idx is not None:
            if isinstance(padding_idx, bool) or not isinstance(padding_idx, (int, np.integer)):
                raise EdoTypeError(f"{label}: padding_idx = {padding_idx!r} must be an integer or None")
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise EdoValueError(f"{label}: padding_idx = {padding_idx} must be in "
                                    f"[{-num_embeddings}, {num_embeddings}) or None")
            padding_idx = int(padding_idx) % num_embeddings
        self.num_embeddings = int(num_embeddings)
        self.embedding_dim = int(embedding_dim)
        self.padding_idx = padding_idx
        self.sparse = bool(sparse)
        self.range_check = bool(range_check)

    @classmethod
    def from_config(cls, num_embeddings: int, options: dict[str, Any], padding_idx: int | None = None
                    ) -> "EmbeddingBase":
        """Build from a validated ``embedding`` config section (type and dim already read)."""
        kwargs = {k: options[k] for k in cls.config_options}
        return cls(num_embeddings, options["dim"], padding_idx=padding_idx, sparse=options["sparse"], **kwargs)

    def create_table(self, rows: int, dim: int, weight_attr: paddle.ParamAttr | None, init_std: float
                     ) -> paddle.Tensor:
        """An fp32 [rows, dim] parameter: ``weight_attr``'s initializer when it names one (or Paddle's global
        one when set), else a normal of std ``init_std``, drawn by ``fill_normal`` for a dynamic-graph table
        on the CPU; the padding row zero."""
        drawn_here = (paddle.in_dynamic_mode() and paddle.get_device() == "cpu" and _global_weight_initializer() is None
                      and paddle.ParamAttr._to_attr(weight_attr).initializer is None)
        initializer = paddle.nn.initializer.Constant(0.0) if drawn_here else paddle.nn.initializer.Normal(0.0, init_std)
        weight = self.create_parameter([rows, dim], attr=weight_attr, dtype="float32", default_initializer=initializer)
        if drawn_here:
            fill_normal(weight, init_std)
        if self.padding_idx is not None and self.padding_idx < rows:
            with paddle.no_grad():
                weight[self.padding_idx] = 0.0
        return weight

    def pack(self) -> "EmbeddingBase":
        """Turn a table trained in full form into its compact form (no-op for most layers)."""
        return self

    @classmethod
    def check_config(cls, config: dict[str, Any]) -> None:
        """Refuse settings of other sections this layer cannot train with (raise ConfigError)."""

    @property
    def storage_dtype(self) -> str:
        """How a table element is stored, as the memory report shows it."""
        raise NotImplementedError

    def estimated_bytes(self) -> int:
        """Bytes the layer holds, by formula (rows x dim x bytes per element + what else it stores)."""
        raise NotImplementedError

    def lookup(self, ids: paddle.Tensor) -> paddle.Tensor:
        raise NotImplementedError

    @dynamic_graph_under_sot
    def forward(self, ids: paddle.Tensor) -> paddle.Tensor:
        """ids [...] int32/int64 -> vectors [..., embedding_dim]."""
        self.check_ids(ids)
        if known_empty(ids):
            return self.empty_lookup(ids)
        return self.lookup(ids)

    def empty_lookup(self, ids: paddle.Tensor) -> paddle.Tensor:
        """What a batch without ids gives: ``[*ids.shape, embedding_dim]`` float32, nothing to train (Paddle's
        gathers, reductions and custom operators fail on empty inputs; even ``nn.Embedding``'s backward
        crashes on one)."""
        return paddle.zeros([*ids.shape, self.embedding_dim], dtype="float32")

    def lookup_columns(self, ids: paddle.Tensor) -> list[paddle.Tensor]:
        """One lookup per column of ``ids`` [..., k] (several ids per position, as hashing makes):
        k tensors [..., embedding_dim]. Tables with sparse gradients may serve them as one lookup."""
        return [self(column) for column in paddle.unbind(ids, axis=-1)]

    def check_ids(self, ids: paddle.Tensor) -> None:
        """Refuse float ids always, and ids out of [0, num_embeddings) when values are known."""
        self.check_id_dtype(ids)
        if self.range_check and paddle.in_dynamic_mode() and 0 not in ids.shape and not self.kernel_checks_ids(ids):
            self.scan_id_range(ids)

    def scan_id_range(self, ids: paddle.Tensor) -> None:
        """check_id_range of the (non-empty) ids' smallest and largest: numpy's scan of ids on the CPU (a
        fifth of the cost of Paddle's ops at a few ids, half at 10^5), else Paddle's and one copy to the host."""
        if ids.place.is_cpu_place():
            values = ids.numpy()
            self.check_id_range(int(values.min()), int(values.max()))
        else:
            self.check_id_range(*paddle.stack([ids.min(), ids.max()]).tolist())

    def kernel_checks_ids(self, ids: paddle.Tensor) -> bool:
        """Whether the lookup will refuse ids outside the table itself, before reading (a native kernel,
        ``kernels.ids_checked_by_kernel`` naming the layer, or the scan of a path that serves instead):
        then no scan of the ids beforehand."""
        return False

    def check_id_dtype(self, ids: paddle.Tensor) -> None:
        if int(ids.dtype) not in _ID_DTYPE_NUMBERS:
            raise EdoTypeError(f"{self.full_name()}: ids must be int32 or int64, got {dtype_name(ids.dtype)}")

    def check_id_range(self, low: int, high: int) -> None:
        """Refuse a batch whose smallest or largest id falls outside [0, num_embeddings)."""
        if low < 0 or high >= self.num_embeddings:
            bad = low if low < 0 else high
            raise EdoIndexError(f"{self.full_name()}: id {bad} is out of range [0, {self.num_embeddings})")

    def extra_repr(self) -> str:
        return (f"{self.num_embeddings}, {self.embedding_dim}, padding_idx={self.padding_idx}, "
                f"sparse={self.sparse}, dtype={self.storage_dtype}")


INNER_FORMATS = ("fp32", *FORMATS)
INNER_STORAGE = Option("fp32", str, choices=INNER_FORMATS, doc="how the inner tables are stored once trained "
                                                              "(packed as PTQ; fp32 keeps them)")


class CompositeEmbedding(EmbeddingBase):
    """A layer built from inner tables (DenseEmbedding children, which quantize() can swap): its
    bytes are its tables' plus its own parameters and buffers. Layers that take ``storage_format``
    train their inner tables in fp32 and pack them to it after training (``pack()``)."""

    storage_format: str = "fp32"

    def keep_inner_tables_as(self, storage_format: str) -> None:
        """Pack the inner tables to ``storage_format`` once trained ('fp32': never)."""
        if storage_format not in INNER_FORMATS:
            raise EdoValueError(f"{type(self).__name__}: storage_format = {storage_format!r} is not supported; "
                                f"supported: {', '.join(INNER_FORMATS)}")
        self.storage_format = storage_format
        self.packed = storage_format == "fp32"

    def pack(self) -> "CompositeEmbedding":
        """Quantize the trained fp32 inner tables to ``storage_format`` (PTQ), as quantize() would."""
        if not self.packed:
            from .dense import DenseEmbedding
            from .quantized import QuantizedEmbedding
            from .swap import swap_sublayers
            swap_sublayers(self, lambda name, layer: QuantizedEmbedding.from_embedding(layer, self.storage_format)
                           if type(layer) is DenseEmbedding else None)
            self.packed = True
            self.packing_error = max(t.packing_error or 0.0 for t in self.tables())
        return self

    def tables(self) -> list[EmbeddingBase]:
        return [layer for layer in self.children() if isinstance(layer, EmbeddingBase)]

    @property
    def storage_dtype(self) -> str:
        return "+".join(sorted({t.storage_dtype for t in self.tables()}))

    def own_bytes(self) -> int:
        """Bytes of parameters and buffers outside the inner tables (projections, id maps)."""
        inner = {id(p) for t in self.tables() for p in [*t.parameters(), *t.buffers()]}
        return sum(int(p.size) * p.element_size() for p in [*self.parameters(), *self.buffers()]
                   if id(p) not in inner)

    def estimated_bytes(self) -> int:
        return sum(t.estimated_bytes() for t in self.tables()) + self.own_bytes()

    def zero_padding(self, ids: paddle.Tensor, vectors: paddle.Tensor) -> paddle.Tensor:
        """Padding ids get exactly zero vectors."""
        if self.padding_idx is None:
            return vectors
        keep = (ids != self.padding_idx).astype(vectors.dtype).unsqueeze(-1)
        return vectors * keep


def embedding_layers(model: paddle.nn.Layer) -> list[tuple[str, paddle.nn.Layer]]:
    """paddle_edo layers and plain paddle.nn.Embedding layers, outermost only."""
    found: list[tuple[str, paddle.nn.Layer]] = []
    for name, layer in model.named_sublayers(include_self=True):
        if any(name.startswith(outer + ".") or outer == "" for outer, _ in found):
            continue
        if isinstance(layer, (EmbeddingBase, paddle.nn.Embedding)):
            found.append((name, layer))
    return found


def unpacked_tables(model: paddle.nn.Layer) -> dict[str, EmbeddingBase]:
    """Tables still in the full form they train in (QAT / PTQ quantized, clustered), by name."""
    return {name: layer for name, layer in model.named_sublayers()
            if isinstance(layer, EmbeddingBase) and not layer.packed}


def pack_trained(model: paddle.nn.Layer, frequencies: dict[str, Any] | None = None) -> list[str]:
    """Pack every table that trained in full form, after training (``frequencies``: a count per id of
    tables by name, which weight a quantized table's packing error); returns the names of those packed."""
    from .quantized import QuantizedEmbedding

    tables = unpacked_tables(model)
    for name, layer in tables.items():
        counts = (frequencies or {}).get(name)
        layer.pack(counts) if isinstance(layer, QuantizedEmbedding) and counts is not None else layer.pack()
    return list(tables)
