"""PSEmbedding: a table held by Fleet parameter servers, looked up from a static program."""
from __future__ import annotations

import copy

import paddle

from ..errors import EdoRuntimeError
from ..schema import Option
from .base import EmbeddingBase
from .registry import register_embedding
from .signature import accepts_old_signature

ENTRIES = ("none", "count_filter", "probability", "show_click")
TABLE_CLASSES = ("MemorySparseTable", "SSDSparseTable", "CommonSparseTable")


@register_embedding("ps_sparse")
class PSEmbedding(EmbeddingBase):
    """A table held by the parameter servers (``paddle.static.nn.sparse_embedding``); static graph only.
    ``distributed.mode: ps`` gives every table of the model this type. Lookups: int64 ids ``[...]`` ->
    float32 ``[..., embedding_dim]`` in a static program; EdoRuntimeError in dynamic graph."""

    remote_rows = True  # monitors get its row gradients from the trainer's fetches, never its rows

    config_options = {
        "entry": Option("none", str, choices=ENTRIES, doc="feature admission of new ids"),
        "count_filter": Option(2, int, low=1, doc="entry count_filter: uses before an id gets a row"),
        "probability": Option(0.5, float, low=0.0, high=1.0, doc="entry probability: chance of admission"),
        "table_class": Option("MemorySparseTable", str, choices=TABLE_CLASSES),
        "geo": Option(False, bool, doc="geo mode: a local table whose deltas reach the servers every k steps"),
    }

    @accepts_old_signature(("num_embeddings", "embedding_dim", "padding_idx", "sparse", "entry", "count_filter",
                            "probability", "table_class", "geo"))
    def __init__(self, num_embeddings: int, embedding_dim: int, *, padding_idx: int | None = None,
                 sparse: bool = True, weight_attr: paddle.ParamAttr | None = None, name: str | None = None,
                 entry: str = "none", count_filter: int = 2, probability: float = 0.5,
                 table_class: str = "MemorySparseTable", geo: bool = False, init_std: float = 0.01) -> None:
        super().__init__(num_embeddings, embedding_dim, padding_idx=padding_idx, sparse=sparse, name=name,
                         range_check=False)
        self.weight_attr, self.init_std = weight_attr, init_std
        self.entry, self.count_filter, self.probability = entry, count_filter, probability
        self.table_class, self.geo = table_class, geo
        self.ids: paddle.Tensor | None = None     # the lookup's [n, 1] ids and output variables, for export
        self.output: paddle.Tensor | None = None

    def _entry(self):
        if self.entry == "count_filter":
            return paddle.distributed.CountFilterEntry(self.count_filter)
        if self.entry == "probability":
            return paddle.distributed.ProbabilityEntry(self.probability)
        if self.entry == "show_click":
            return paddle.distributed.ShowClickEntry("show", "click")
        return None

    @property
    def storage_dtype(self) -> str:
        return "float32"

    def estimated_bytes(self) -> int:
        return 0  # the rows live on the servers

    def lookup(self, ids: paddle.Tensor) -> paddle.Tensor:
        if paddle.in_dynamic_mode():
            raise EdoRuntimeError(f"{self.full_name()}: a parameter-server table exists in static programs only")
        flat = self.ids = ids.reshape([-1, 1])  # the servers' lookup takes [n, 1] ids
        attr = copy.copy(self.weight_attr) if self.weight_attr is not None else paddle.ParamAttr()
        attr.name = attr.name or f"ps_{self.full_name()}"
        attr.initializer = attr.initializer or paddle.nn.initializer.Normal(0.0, self.init_std)
        if self.geo:  # geo's communicator needs a plain sparse-gradient table (sparse_embedding fails in init_worker)
            self.output = paddle.nn.Embedding(self.num_embeddings, self.embedding_dim, padding_idx=self.padding_idx, sparse=True,
                                              weight_attr=attr)(flat).reshape([-1, self.embedding_dim])
        else:
            self.output = paddle.static.nn.sparse_embedding(
                flat, [self.num_embeddings, self.embedding_dim], padding_idx=self.padding_idx,
                entry=self._entry(), table_class=self.table_class, param_attr=attr)
        if len(ids.shape) == 1:
            return self.output
        return self.output.reshape([-1, *ids.shape[1:], self.embedding_dim])
