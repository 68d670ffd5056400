"""Data sets (MovieLens-100K, synthetic Zipf CTR, the reviews, a user's CSV / Parquet / Criteo files)
and batching through paddle.io. Names load on first use: the vocabularies and hashing need no Paddle."""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "CTRBatches": "ctr", "CTRTable": "ctr", "FieldSpec": "ctr", "Splits": "ctr", "count_frequencies": "ctr",
    "make_loader": "ctr", "split_rows": "ctr", "split_table": "ctr", "DataError": "ctr",
    "load_chnsenti": "chnsenti", "load_reviews": "chnsenti", "text_encoder": "chnsenti", "write_criteo_synthetic": "criteo",
    "write_csv": "csv_ctr", "default_cache_dir": "packaged", "fetch": "packaged", "load_movielens": "movielens",
    "StreamedSplit": "stream", "load_rows": "stream", "load_tables": "stream",
    "make_synthetic_ctr": "synthetic", "zipf_ids": "synthetic", "DataPlan": "tabular", "TabularSource": "tabular",
    "load_dataset": "datasets", "load_files": "datasets",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'paddle_edo.data' has no attribute {name!r}")
