"""Data sets (MovieLens-100K, synthetic Zipf CTR, a user's CSV) and batching through paddle.io."""
from __future__ import annotations

from typing import Any

from .chnsenti import load_chnsenti, load_reviews
from .csv_ctr import load_csv, write_csv
from .ctr import (CTRBatches, CTRTable, DataError, FieldSpec, Splits, count_frequencies, make_loader, split_rows,
                  split_table)
from .fetch import default_cache_dir, fetch
from .movielens import load_movielens
from .synthetic import make_synthetic_ctr, zipf_ids


def load_dataset(data_config: dict[str, Any]) -> Splits:
    """The train / valid / test splits a validated ``data`` config section describes."""
    name = data_config["name"]
    if name == "movielens":
        table = load_movielens(data_config["cache_dir"])
    elif name == "chnsenti":
        return load_chnsenti(data_config)
    elif name == "synthetic":
        table = make_synthetic_ctr(**data_config["synthetic"])
    else:
        csv = data_config["csv"]
        table = load_csv(csv["path"], csv["label"], csv["fields"], csv["multi_value_separator"])
    return split_table(table, data_config["split"], data_config["seed"])


__all__ = ["CTRBatches", "CTRTable", "DataError", "FieldSpec", "Splits", "count_frequencies", "default_cache_dir",
           "fetch", "load_chnsenti", "load_csv", "load_dataset", "load_movielens", "load_reviews", "make_loader", "make_synthetic_ctr",
           "split_rows", "split_table", "write_csv", "zipf_ids"]
