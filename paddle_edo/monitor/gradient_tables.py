"""Which tables of a model a monitor reads gradients from: a table with trainable rows itself, or the
inner tables of a composite layer (``embeddings.user.table`` of a hashed field)."""
from __future__ import annotations

from dataclasses import dataclass

import paddle

from ..nn.base import EmbeddingBase, embedding_layers, table_settings
from .row_gradients import RowGradientReader


@dataclass
class GradientTable:
    name: str
    outer: str                       # the embedding layer it belongs to (itself for a plain table)
    layer: paddle.nn.Layer
    padding_idx: int | None
    rows: int
    read: RowGradientReader
    remote: bool                     # its rows live on parameter servers (no update-to-weight ratio)

    @property
    def plain(self) -> bool:
        """The embedding layer itself (its lookups are its rows), not a composite's inner table."""
        return self.name == self.outer


def is_table(layer: paddle.nn.Layer) -> bool:
    return isinstance(layer, (EmbeddingBase, paddle.nn.Embedding))


def remote_rows(layer: paddle.nn.Layer) -> bool:
    """A paddle_edo table whose rows live on parameter servers (``paddle.nn.Embedding`` holds its own)."""
    return isinstance(layer, EmbeddingBase) and layer.remote_rows


def trains_rows(layer: paddle.nn.Layer) -> bool:
    """A table whose rows receive gradients: a weight parameter, or rows it updates itself."""
    return (callable(getattr(layer, "row_gradients", None)) or isinstance(getattr(layer, "weight", None), paddle.Tensor)
            or remote_rows(layer))


def gradient_tables(model: paddle.nn.Layer) -> list[GradientTable]:
    """Every table with trainable rows: embedding layers themselves, or the inner tables of composites."""
    found = []
    for outer, layer in embedding_layers(model):
        inner = [("", layer)] if trains_rows(layer) else [
            (name, sub) for name, sub in layer.named_sublayers() if is_table(sub) and trains_rows(sub)]
        for name, table in inner:
            if any(name.startswith(other + ".") for other, _ in inner if other and other != name):
                continue  # a table inside another table
            full = ".".join(part for part in (outer, name) if part)
            weight = getattr(table, "weight", None)
            rows = weight.shape[0] if weight is not None else table.num_embeddings
            found.append(GradientTable(full, outer, table, table_settings(table)[0], rows, RowGradientReader(table),
                                        remote_rows(table)))
    return found
