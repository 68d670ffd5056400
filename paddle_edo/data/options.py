"""The ``data`` config section: which data set, its split, and each source's own keys."""
from __future__ import annotations

from typing import Any

from ..schema import ConfigError, Option

DATA_OPTIONS: dict[str, Any] = {
    "name": Option("movielens", str, choices=("movielens", "synthetic", "csv", "chnsenti"), doc="which data set"),
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
    "csv": {
        "path": Option(None, str, nullable=True, doc="CSV file with a header row"),
        "label": Option("label", str, doc="label column (0/1)"),
        "fields": Option({}, dict, doc="column name -> vocabulary size"),
        "multi_value_separator": Option("|", str),
    },
    "text": {  # data.name: chnsenti (Chinese review sentiment): segmentation and vocabularies
        "max_words": Option(48, int, low=1, doc="words kept per sentence"),
        "max_chars_per_word": Option(4, int, low=1, doc="characters kept per word"),
        "min_freq": Option(1, int, low=1, doc="training-split count a word needs to enter the vocabulary"),
        "max_word_vocab": Option(None, int, low=3, nullable=True, doc="cap on word ids, [PAD] and [UNK] included"),
        "max_char_vocab": Option(None, int, low=3, nullable=True, doc="cap on character ids"),
        "hmm": Option(True, bool, doc="jieba's HMM for words missing from its dictionary"),
        "user_dicts": Option([], list, item_kind=str, doc="jieba user dictionaries"),
    },
}


def check_data_section(data: dict[str, Any]) -> None:
    """Refuse a validated ``data`` section whose keys disagree with each other."""
    split = data["split"]
    if len(split) != 3 or abs(sum(split) - 1.0) > 1e-6 or min(split) <= 0:
        raise ConfigError(f"data.split = {split} must be three positive fractions that add up to 1")
    if data["name"] == "csv":
        csv = data["csv"]
        if not csv["path"]:
            raise ConfigError("data.csv.path = null: data.name 'csv' needs the path of a CSV file")
        for name, size in csv["fields"].items():
            if isinstance(size, bool) or not isinstance(size, int) or size < 1:
                raise ConfigError(f"data.csv.fields.{name} = {size!r} must be a vocabulary size >= 1")
        if not csv["fields"]:
            raise ConfigError("data.csv.fields = {}: name at least one id column and its vocabulary size")
