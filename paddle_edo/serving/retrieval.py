"""Nearest rows of a table with FAISS: exact inner product / cosine / L2, or approximate (HNSW, IVF) with
scalar or product quantization for large tables; defaults chosen from the table's size; saved beside the
table with what it was built from, so a later load refuses an index that does not fit its table."""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DataError, EdoValueError

METRICS = ("ip", "cosine", "l2")
KINDS = ("auto", "flat", "hnsw", "ivf")
CODECS = ("none", "sq8", "pq")
EXACT_UP_TO = 50_000        # rows an exact (flat) index serves fast enough
HNSW_UP_TO = 5_000_000      # above: IVF with 8-bit scalar quantization keeps the index small


@dataclass(frozen=True)
class IndexSpec:
    """What an index is: metric, structure, compression and their parameters."""

    metric: str = "cosine"
    kind: str = "auto"
    codec: str = "none"
    hnsw_m: int = 32
    ef_construction: int = 80
    ef_search: int = 128
    nlist: int | None = None      # IVF lists (default 4 sqrt(rows))
    nprobe: int = 32
    pq_m: int | None = None       # PQ sub-vectors (default dim / 4)

    def resolved(self, rows: int, dim: int) -> "IndexSpec":
        """The spec with ``auto`` choices made for a table of ``rows`` x ``dim``."""
        for key, value, allowed in (("metric", self.metric, METRICS), ("kind", self.kind, KINDS),
                                    ("codec", self.codec, CODECS)):
            if value not in allowed:
                raise EdoValueError(f"index {key} = {value!r}; expected one of {', '.join(allowed)}")
        kind, codec = self.kind, self.codec
        if kind == "auto":
            kind = "flat" if rows <= EXACT_UP_TO else "hnsw" if rows <= HNSW_UP_TO else "ivf"
            if kind == "ivf" and codec == "none":
                codec = "sq8"
        if codec == "pq" and dim % (self.pq_m or max(1, dim // 4)):
            raise EdoValueError(f"index codec 'pq': dim {dim} is not divisible by pq_m = {self.pq_m or dim // 4}")
        nlist = self.nlist or max(1, min(rows // 39, int(4 * np.sqrt(rows))))  # faiss wants 39 points a list
        return IndexSpec(self.metric, kind, codec, self.hnsw_m, self.ef_construction, self.ef_search, nlist,
                         self.nprobe, self.pq_m or max(1, dim // 4))


class NeighbourIndex:
    """A FAISS index over a table's rows; ``search(queries, k)`` -> (scores [n, k], ids [n, k]), best
    first (inner product and cosine: larger is nearer; l2: squared distance, smaller is nearer)."""

    def __init__(self, index: Any, spec: IndexSpec, rows: int, dim: int, table: str | None = None) -> None:
        self.index, self.spec, self.rows, self.dim, self.table = index, spec, rows, dim, table

    @classmethod
    def build(cls, vectors: np.ndarray, spec: IndexSpec = IndexSpec(), table: str | None = None,
              seed: int = 0) -> "NeighbourIndex":
        import faiss

        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        rows, dim = vectors.shape
        if rows == 0:
            raise EdoValueError("NeighbourIndex: the table has no rows")
        spec = spec.resolved(rows, dim)
        metric = faiss.METRIC_L2 if spec.metric == "l2" else faiss.METRIC_INNER_PRODUCT
        if spec.metric == "cosine":
            vectors = normalised(vectors)
        if spec.kind == "flat":
            index = faiss.IndexFlat(dim, metric) if spec.codec == "none" else \
                faiss.IndexScalarQuantizer(dim, faiss.ScalarQuantizer.QT_8bit, metric) if spec.codec == "sq8" else \
                faiss.IndexPQ(dim, spec.pq_m, 8, metric)
        elif spec.kind == "hnsw":
            index = faiss.IndexHNSWFlat(dim, spec.hnsw_m, metric) if spec.codec == "none" else \
                faiss.IndexHNSWSQ(dim, faiss.ScalarQuantizer.QT_8bit, spec.hnsw_m, metric) if spec.codec == "sq8" \
                else faiss.IndexHNSWPQ(dim, spec.pq_m, spec.hnsw_m)
            index.hnsw.efConstruction = spec.ef_construction
        else:
            quantizer = faiss.IndexFlat(dim, metric)
            index = faiss.IndexIVFFlat(quantizer, dim, spec.nlist, metric) if spec.codec == "none" else \
                faiss.IndexIVFScalarQuantizer(quantizer, dim, spec.nlist, faiss.ScalarQuantizer.QT_8bit, metric) \
                if spec.codec == "sq8" else faiss.IndexIVFPQ(quantizer, dim, spec.nlist, spec.pq_m, 8, metric)
            index.own_fields = True
            quantizer.this.disown()
        if not index.is_trained:
            sample = vectors[np.random.default_rng(seed).permutation(rows)[:max(256 * spec.nlist, 100_000)]] \
                if spec.kind == "ivf" else vectors
            index.train(sample)
        index.add(vectors)
        built = cls(index, spec, rows, dim, table)
        built._tune()
        return built

    def _tune(self) -> None:
        import faiss

        if self.spec.kind == "hnsw":
            faiss.downcast_index(self.index).hnsw.efSearch = self.spec.ef_search
        elif self.spec.kind == "ivf":
            faiss.extract_index_ivf(self.index).nprobe = self.spec.nprobe

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        queries = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
        if queries.shape[1] != self.dim:
            raise EdoValueError(f"NeighbourIndex{f' of {self.table!r}' if self.table else ''}: queries of dim "
                                f"{queries.shape[1]}, the index holds dim {self.dim}")
        if not 1 <= k <= self.rows:
            raise EdoValueError(f"NeighbourIndex: k = {k} must lie in [1, {self.rows}] (the rows indexed)")
        if self.spec.metric == "cosine":
            queries = normalised(queries)
        scores, ids = self.index.search(queries, k)
        return scores, ids

    def nbytes(self) -> int:
        import faiss

        return int(faiss.serialize_index(self.index).nbytes)

    def save(self, path: str | Path) -> Path:
        """``<path>`` (the FAISS index) and ``<path>.json`` (spec, shape, table), each written atomically."""
        import faiss

        path = Path(path)
        temporary = path.with_name(path.name + ".tmp")
        faiss.write_index(self.index, str(temporary))
        os.replace(temporary, path)
        meta = path.with_name(path.name + ".json")
        meta_temporary = meta.with_name(meta.name + ".tmp")
        meta_temporary.write_text(json.dumps({"spec": asdict(self.spec), "rows": self.rows, "dim": self.dim,
                                              "table": self.table}))
        os.replace(meta_temporary, meta)
        return path

    @classmethod
    def load(cls, path: str | Path, rows: int | None = None, dim: int | None = None) -> "NeighbourIndex":
        """Read a saved index, refusing one whose shape is not the table's (``rows``, ``dim``) it serves."""
        import faiss

        path = Path(path)
        meta_path = path.with_name(path.name + ".json")
        if not path.is_file() or not meta_path.is_file():
            raise DataError(f"index {path} (and {meta_path.name}) not found: build it with tools/retrieve.py --build")
        meta = json.loads(meta_path.read_text())
        if dim is not None and meta["dim"] != dim:
            raise DataError(f"index {path} holds vectors of dim {meta['dim']}; the table has dim {dim}")
        if rows is not None and meta["rows"] != rows:
            raise DataError(f"index {path} holds {meta['rows']} rows; the table has {rows}: build it again")
        try:
            index = faiss.read_index(str(path))
        except RuntimeError as exc:
            raise DataError(f"index {path} cannot be read ({str(exc).splitlines()[0]})") from None
        loaded = cls(index, IndexSpec(**meta["spec"]), meta["rows"], meta["dim"], meta["table"])
        loaded._tune()
        return loaded


def normalised(vectors: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length (zero rows stay zero)."""
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1.0)
