"""Trained tables out of a model, as files a serving box opens without Paddle (``TableStore``).

Per type: fp32 tables (dense, and cached ones after ``uncache``) as their rows in ``.npy``; packed
quantized tables as their packed bytes and row parameters in ``.bin`` (int8 3.76x smaller than fp32 at
dim 64); hash tables as their shared table plus the hash that maps ids to its rows (their id space has
no end, so rows cannot be listed); every other composite table (QR, mixed-dimension, clustered,
multi-task, char+word parts) as its materialised rows for ids 0..num_embeddings-1."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import paddle
import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import EdoValueError
from ..nn.base import EmbeddingBase
from ..nn.dense import DenseEmbedding
from ..nn.quantized import QuantizedEmbedding
from ..nn.shared import HashEmbedding
from ..data.vocabulary import file_digest
from .format import MANIFEST, VERSION, write_manifest, write_packed

MATERIALISE_CHUNK = 65_536  # ids looked up at a time when rows are materialised


def export_tables(model: paddle.nn.Layer, folder: str | Path, values: dict[str, Any] | None = None,
                  id_sources: dict[str, str] | None = None) -> Path:
    """Write every table ``model.table_fields()`` names into ``folder`` and the manifest ``tables.json``
    last (each file to a temporary name, then renamed). ``values``: field -> its values in id order (a
    list, or an object with ``values`` / ``tokens``) so that rows can be found by raw value;
    ``id_sources``: field -> how raw values became ids (vocabulary, hash, given). Returns the manifest."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    layers = dict(model.named_sublayers())
    fields = model.table_fields() if hasattr(model, "table_fields") else {
        name: name for name, layer in layers.items() if isinstance(layer, EmbeddingBase)}
    values, id_sources = values or {}, id_sources or {}
    manifest: dict[str, Any] = {"version": VERSION, "tables": {}}
    written_values: dict[str, dict[str, Any]] = {}
    with paddle.no_grad():
        for name, field in fields.items():
            entry = _export_table(layers[name], folder, name)
            entry["field"] = field
            entry["id_source"] = id_sources.get(field, "given")
            if field in values and field not in written_values:
                written_values[field] = _write_values(values[field], folder / f"values.{field}.parquet")
            entry.update(written_values.get(field, {"values": None}))
            manifest["tables"][name] = entry
    write_manifest(folder, manifest)
    return folder / MANIFEST


def _export_table(layer: paddle.nn.Layer, folder: Path, name: str) -> dict[str, Any]:
    if isinstance(layer, QuantizedEmbedding) and layer.packed:
        codes = layer.codes.numpy()
        if layer.format.is_float:  # fp16 / bf16 tables: their 16 bits as uint16
            codes = codes.view(np.uint16) if codes.dtype.itemsize == 2 else \
                paddle.to_tensor(codes).view("uint16").numpy()
        params = layer.row_params.numpy().astype(np.float16) if layer.row_params is not None else None
        path = folder / f"{name}.bin"
        write_packed(path, codes, params, {"format": layer.format.name, "rows": layer.num_embeddings,
                                           "dim": layer.embedding_dim, "padding_idx": layer.padding_idx})
        return {"kind": "packed", "file": path.name, "rows": layer.num_embeddings, "dim": layer.embedding_dim,
                "format": layer.format.name, "padding_idx": layer.padding_idx, "sha256": file_digest(path)}
    if type(layer) is HashEmbedding and type(layer.table) is DenseEmbedding:
        path = _save_npy(folder / f"{name}.npy", layer.table.weight.numpy())
        return {"kind": "hashed", "file": path.name, "rows": layer.num_embeddings, "dim": layer.embedding_dim,
                "format": "float32", "padding_idx": layer.padding_idx, "num_buckets": layer.num_buckets,
                "num_hashes": layer.num_hashes, "combine": layer.combine,
                "coefficients": layer.coefficients.numpy().tolist(), "sha256": file_digest(path)}
    if type(layer) is DenseEmbedding:
        rows = layer.weight.numpy()
    elif isinstance(layer, EmbeddingBase):
        rows = np.concatenate([layer(paddle.arange(start, min(start + MATERIALISE_CHUNK, layer.num_embeddings),
                                                   dtype="int64")).astype("float32").numpy()
                               for start in range(0, layer.num_embeddings, MATERIALISE_CHUNK)])
    else:
        raise EdoValueError(f"export_tables: {name} is a {type(layer).__name__}, not a paddle_edo table")
    path = _save_npy(folder / f"{name}.npy", rows.astype(np.float32, copy=False))
    return {"kind": "rows", "file": path.name, "rows": int(rows.shape[0]), "dim": int(rows.shape[1]),
            "format": "float32", "padding_idx": getattr(layer, "padding_idx", None), "sha256": file_digest(path),
            "materialised_from": None if type(layer) is DenseEmbedding else type(layer).__name__}


def _save_npy(path: Path, rows: np.ndarray) -> Path:
    temporary = path.with_name(path.name + ".tmp.npy")
    np.save(temporary, rows)
    os.replace(temporary, path)
    return path


def _write_values(vocabulary: Any, path: Path) -> dict[str, Any]:
    """A field's raw values in id order (null where an id has none, e.g. the unknown id 0 of a data plan)."""
    if hasattr(vocabulary, "tokens"):  # paddle_edo.text.Vocab: [PAD] = 0, [UNK] = 1
        values, unknown = list(vocabulary.tokens), 1
    elif hasattr(vocabulary, "values"):  # paddle_edo.data.vocabulary.Vocabulary: ids from 1, 0 unknown
        values, unknown = [None, *vocabulary.values.to_pylist()], 0
    else:
        values, unknown = list(vocabulary), None
    temporary = path.with_name(path.name + ".tmp")
    pq.write_table(pa.table({"value": pa.array(values, pa.string())}), temporary)
    os.replace(temporary, path)
    return {"values": path.name, "unknown_id": unknown, "values_sha256": file_digest(path)}
