"""Swap a model's fp32 embedding tables for quantized ones in place, and back."""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Iterable, Mapping

import numpy as np
import paddle

from ..errors import EdoDeprecationWarning, EdoTypeError
from ..runtime import release_freed_memory
from .dense import DenseEmbedding
from .quantized import QuantizedEmbedding, is_low_precision
from .swap import swap_sublayers


@dataclass(frozen=True)
class TableError:
    """How far one packed table is from the fp32 table it replaced."""

    name: str
    storage_format: str
    rows: int
    relative_l2: float       # mean ||x - x_hat|| / ||x|| over rows, weighted by id frequency when given
    frequency_weighted: bool
    bytes_before: int
    bytes_after: int


def quantize(model: paddle.nn.Layer, storage_format: str = "int8", include: Iterable[str] | None = None,
             exclude: Iterable[str] | None = None, *, dtype: str | None = None, row_range: str = "auto",
             report: bool = False, frequencies: Mapping[str, np.ndarray] | None = None
             ) -> paddle.nn.Layer | tuple[paddle.nn.Layer, list[TableError]]:
    """Replace every ``paddle.nn.Embedding`` and ``DenseEmbedding`` under ``model`` by a packed
    ``QuantizedEmbedding`` of ``storage_format``; tables inside other layers (hash, QR, ...) are reached too.

    ``include`` / ``exclude`` are glob patterns over sublayer names (``"embeddings.*"``). Unpacked
    QAT / PTQ tables are packed to their own format. ``row_range``: how intN rows choose their range
    ('auto', 'search', 'min_max'). Returns the model; with ``report=True``, ``(model, errors)``: a
    TableError per table packed, its row error weighted by ``frequencies`` (a count per id, by sublayer
    name) where given. (``dtype`` is the old name of ``storage_format``.)
    """
    if dtype is not None:
        warnings.warn("quantize(dtype=...) is now quantize(storage_format=...); the old name goes in the next "
                      "release", EdoDeprecationWarning, stacklevel=2)
        storage_format = dtype
    if isinstance(model, (paddle.nn.Embedding, DenseEmbedding)):
        raise EdoTypeError("quantize() swaps sublayers in place; for a bare table use "
                           "QuantizedEmbedding.from_embedding(table, storage_format)")
    frequencies = dict(frequencies or {})
    errors: list[TableError] = []

    def packed(name: str, layer: paddle.nn.Layer) -> paddle.nn.Layer | None:
        counts = frequencies.get(name)
        if isinstance(layer, (paddle.nn.Embedding, DenseEmbedding)):
            table = QuantizedEmbedding.from_embedding(layer, storage_format, row_range, counts)
            errors.append(_error(name, table, layer.weight.size * 4, counts))
            return table
        if isinstance(layer, QuantizedEmbedding) and not layer.packed:
            before = layer.weight.size * 4
            layer.pack(counts)
            errors.append(_error(name, layer, before, counts))
        return None

    swap_sublayers(model, packed, include, exclude)
    release_freed_memory()
    return (model, errors) if report else model


def _error(name: str, table: QuantizedEmbedding, bytes_before: int, counts: np.ndarray | None) -> TableError:
    return TableError(name, table.format.name, table.num_embeddings, float(table.packing_error), counts is not None,
                      int(bytes_before), table.estimated_bytes())


def row_updated_tables(model: paddle.nn.Layer) -> list[QuantizedEmbedding]:
    """Tables that apply their own row updates (low_precision mode)."""
    return [layer for _, layer in model.named_sublayers() if is_low_precision(layer)]


def dequantize_model(model: paddle.nn.Layer) -> paddle.nn.Layer:
    """Replace every QuantizedEmbedding by the fp32 ``paddle.nn.Embedding`` it decodes to; returns the model."""
    swap_sublayers(model, lambda name, layer: layer.dequantize() if isinstance(layer, QuantizedEmbedding) else None)
    return model
