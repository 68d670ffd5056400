"""The data sets a ``data`` config section names, as train / valid / test splits."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from .chnsenti import load_chnsenti
from .ctr import Splits, split_table
from .movielens import load_movielens
from .options import TABULAR_NAMES
from .stream import StreamedSplit, load_tables
from .synthetic import make_synthetic_ctr
from .tabular import SPLITS, TabularSource, prepare_plan


def load_dataset(data_config: dict[str, Any], state_dir: str | Path | None = None) -> Splits:
    """The train / valid / test splits a validated ``data`` config section describes. The user's files
    (csv, parquet, criteo) keep their data plan (vocabularies, statistics) in ``state_dir``, made once."""
    name = data_config["name"]
    if name in TABULAR_NAMES:
        return load_files(data_config, None if state_dir is None else Path(state_dir))
    if name == "movielens":
        table = load_movielens(data_config["cache_dir"])
    elif name == "chnsenti":
        return load_chnsenti(data_config)
    else:
        table = make_synthetic_ctr(**data_config["synthetic"])
    return split_table(table, data_config["split"], data_config["seed"])


def load_files(data_config: dict[str, Any], state_dir: Path | None) -> Splits:
    """A user's files: the plan (made or reloaded), then the splits in memory or streamed (data.files.in_memory)."""
    files = data_config["files"]
    plan = prepare_plan(TabularSource.from_config(data_config), state_dir)
    in_memory = files["in_memory"]
    if in_memory == "auto":
        in_memory = sum(f.stat().st_size for f in plan.source.files) <= files["in_memory_bytes"]
    if in_memory:
        tables = load_tables(plan)
        return Splits(*(tables[split] for split in SPLITS), plan=plan)
    return Splits(*(StreamedSplit(plan, split, files["shuffle_buffer"]) for split in SPLITS), plan=plan)
