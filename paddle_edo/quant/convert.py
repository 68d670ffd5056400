"""Swap a model's fp32 embedding tables for quantized ones, in place."""
from __future__ import annotations

from fnmatch import fnmatch
from typing import Iterable, Iterator

import paddle

from ..errors import EdoTypeError
from ..nn.dense import DenseEmbedding
from ..nn.quantized import QuantizedEmbedding


def _selected(name: str, include: Iterable[str] | None, exclude: Iterable[str] | None) -> bool:
    if include is not None and not any(fnmatch(name, p) for p in include):
        return False
    return not (exclude is not None and any(fnmatch(name, p) for p in exclude))


def _children(model: paddle.nn.Layer) -> Iterator[tuple[paddle.nn.Layer, str, str, paddle.nn.Layer]]:
    """(parent, key, full name, child) for every sublayer, listed before any is swapped."""
    for parent_name, parent in list(model.named_sublayers(include_self=True)):
        for key, child in list(parent._sub_layers.items()):
            yield parent, key, f"{parent_name}.{key}" if parent_name else key, child


def quantize(model: paddle.nn.Layer, dtype: str = "int8", include: Iterable[str] | None = None,
             exclude: Iterable[str] | None = None) -> paddle.nn.Layer:
    """Replace every ``paddle.nn.Embedding`` and ``DenseEmbedding`` under ``model`` by a packed
    ``QuantizedEmbedding`` of ``dtype``; tables inside other layers (hash, QR, ...) are reached too.

    ``include`` / ``exclude`` are glob patterns over sublayer names (``"embeddings.*"``). Unpacked
    QAT / PTQ tables are packed to their own dtype. Returns the model.
    """
    if isinstance(model, (paddle.nn.Embedding, DenseEmbedding)):
        raise EdoTypeError("quantize() swaps sublayers in place; for a bare table use "
                           "QuantizedEmbedding.from_embedding(table, dtype)")
    for parent, key, name, child in _children(model):
        if not _selected(name, include, exclude):
            continue
        if isinstance(child, (paddle.nn.Embedding, DenseEmbedding)):
            parent._sub_layers[key] = QuantizedEmbedding.from_embedding(child, dtype)
        elif isinstance(child, QuantizedEmbedding) and not child.packed:
            child.pack()
    return model


def row_updated_tables(model: paddle.nn.Layer) -> list[QuantizedEmbedding]:
    """Tables that apply their own row updates (low_precision mode)."""
    return [layer for _, layer in model.named_sublayers()
            if isinstance(layer, QuantizedEmbedding) and layer.mode == "low_precision"]


def dequantize_model(model: paddle.nn.Layer) -> paddle.nn.Layer:
    """Replace every QuantizedEmbedding by the fp32 ``paddle.nn.Embedding`` it decodes to; returns the model."""
    for parent, key, _, child in _children(model):
        if isinstance(child, QuantizedEmbedding):
            parent._sub_layers[key] = child.dequantize()
    return model
