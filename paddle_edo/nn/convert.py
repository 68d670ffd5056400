"""Swap a model's fp32 embedding tables for quantized ones in place, and back."""
from __future__ import annotations

import warnings
from typing import Iterable

import paddle

from ..errors import EdoDeprecationWarning, EdoTypeError
from .dense import DenseEmbedding
from .quantized import QuantizedEmbedding
from .swap import swap_sublayers


def quantize(model: paddle.nn.Layer, storage_format: str = "int8", include: Iterable[str] | None = None,
             exclude: Iterable[str] | None = None, *, dtype: str | None = None) -> paddle.nn.Layer:
    """Replace every ``paddle.nn.Embedding`` and ``DenseEmbedding`` under ``model`` by a packed
    ``QuantizedEmbedding`` of ``storage_format``; tables inside other layers (hash, QR, ...) are reached too.

    ``include`` / ``exclude`` are glob patterns over sublayer names (``"embeddings.*"``). Unpacked
    QAT / PTQ tables are packed to their own format. Returns the model. (``dtype`` is the old name of
    ``storage_format``.)
    """
    if dtype is not None:
        warnings.warn("quantize(dtype=...) is now quantize(storage_format=...); the old name goes in the next "
                      "release", EdoDeprecationWarning, stacklevel=2)
        storage_format = dtype
    if isinstance(model, (paddle.nn.Embedding, DenseEmbedding)):
        raise EdoTypeError("quantize() swaps sublayers in place; for a bare table use "
                           "QuantizedEmbedding.from_embedding(table, storage_format)")

    def packed(name: str, layer: paddle.nn.Layer) -> paddle.nn.Layer | None:
        if isinstance(layer, (paddle.nn.Embedding, DenseEmbedding)):
            return QuantizedEmbedding.from_embedding(layer, storage_format)
        if isinstance(layer, QuantizedEmbedding) and not layer.packed:
            layer.pack()
        return None

    swap_sublayers(model, packed, include, exclude)
    return model


def row_updated_tables(model: paddle.nn.Layer) -> list[QuantizedEmbedding]:
    """Tables that apply their own row updates (low_precision mode)."""
    return [layer for _, layer in model.named_sublayers()
            if isinstance(layer, QuantizedEmbedding) and layer.mode == "low_precision"]


def dequantize_model(model: paddle.nn.Layer) -> paddle.nn.Layer:
    """Replace every QuantizedEmbedding by the fp32 ``paddle.nn.Embedding`` it decodes to; returns the model."""
    swap_sublayers(model, lambda name, layer: layer.dequantize() if isinstance(layer, QuantizedEmbedding) else None)
    return model
