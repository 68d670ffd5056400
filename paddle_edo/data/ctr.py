"""Categorical CTR data in memory: fields, id columns, labels; seeded splits; batches via paddle.io."""
from __future__ import annotations

from dataclasses import dataclass, field as dataclass_field
from typing import Any, Iterator

import numpy as np
import paddle

from ..errors import DataError


@dataclass(frozen=True)
class FieldSpec:
    """One categorical field. Id 0 is padding (multi-valued) or unknown; real ids are 1..vocab_size-1."""

    name: str
    vocab_size: int
    max_len: int = 1  # > 1: multi-valued, ids padded with 0 to max_len

    @property
    def multi_valued(self) -> bool:
        return self.max_len > 1


@dataclass
class CTRTable:
    """Id columns (int64, [N] or [N, max_len]) per field, 0/1 labels (float32, [N]), optional other
    per-row targets (e.g. MovieLens ratings, for multi-task models) and optional dense features
    (float32 [N, len(dense_features)], numeric columns)."""

    fields: list[FieldSpec]
    ids: dict[str, np.ndarray]
    labels: np.ndarray
    targets: dict[str, np.ndarray] = dataclass_field(default_factory=dict)
    dense: np.ndarray | None = None
    dense_features: list[str] = dataclass_field(default_factory=list)
    values: dict[str, list] = dataclass_field(default_factory=dict)  # field -> raw values in id order (None: no value)

    def __post_init__(self) -> None:
        n = len(self.labels)
        for field in self.fields:
            column = self.ids[field.name]
            expected = (n, field.max_len) if field.multi_valued else (n,)
            if column.shape != expected:
                raise DataError(f"field {field.name!r}: ids of shape {column.shape}, expected {expected}")
        if self.dense_features and (self.dense is None or self.dense.shape != (n, len(self.dense_features))):
            raise DataError(f"dense features {self.dense_features}: values of shape "
                            f"{None if self.dense is None else self.dense.shape}, expected "
                            f"{(n, len(self.dense_features))}")

    def __len__(self) -> int:
        return len(self.labels)

    def take(self, index: np.ndarray) -> "CTRTable":
        return CTRTable(self.fields, {k: v[index] for k, v in self.ids.items()}, self.labels[index],
                        {k: v[index] for k, v in self.targets.items()},
                        None if self.dense is None else self.dense[index], self.dense_features, self.values)

    def shard(self, rank: int, world_size: int) -> "CTRTable":
        """Rank ``rank``'s rows: every rank gets the same count (collective steps need all ranks), so up to
        world_size - 1 rows are left out."""
        if world_size == 1:
            return self
        usable = len(self) - len(self) % world_size
        return self.take(np.arange(rank, usable, world_size))

    def head(self, rows: int) -> "CTRTable":
        return self if rows >= len(self) else self.take(np.arange(rows))

    def iter_batches(self, batch_size: int, shuffle: bool, seed: int, epoch: int, skip_batches: int = 0
                     ) -> Iterator[dict[str, np.ndarray]]:
        """Batches as dicts of arrays (fields, ``label``, targets, ``dense``); the order depends only on
        (seed, epoch)."""
        n = len(self)
        order = np.random.default_rng([seed, epoch]).permutation(n) if shuffle else np.arange(n)
        for start in range(skip_batches * batch_size, n, batch_size):
            index = order[start:start + batch_size]
            batch = {name: column[index] for name, column in self.ids.items()}
            batch["label"] = self.labels[index]
            batch.update({name: values[index] for name, values in self.targets.items()})
            if self.dense_features:
                batch["dense"] = self.dense[index]
            yield batch

    def validate(self, source: str) -> None:
        """Refuse ids outside [0, vocab_size) with a message naming source, field, row and value."""
        for field in self.fields:
            column = self.ids[field.name]
            bad = np.flatnonzero(((column < 0) | (column >= field.vocab_size)).reshape(len(column), -1).any(1))
            if bad.size:
                row = int(bad[0])
                values = np.atleast_1d(column[row])
                value = int(values[(values < 0) | (values >= field.vocab_size)][0])
                raise DataError(f"{source}: row {row}, field {field.name!r}: id {value} is out of range "
                                f"[0, {field.vocab_size})")


@dataclass
class Splits:
    """The train / valid / test splits of a data set (``CTRTable``\ s, or ``StreamedSplit``\ s of a user's
    files), ``extra`` subsets evaluated beside test (text data's ``test_oov``), each text field's
    ``Vocab``, each field's raw values in id order (None where an id has none), and for a user's files the
    ``DataPlan`` that maps them. ``fields`` and ``dense_features`` are the training split's."""

    train: CTRTable
    valid: CTRTable
    test: CTRTable
    extra: dict[str, CTRTable] = dataclass_field(default_factory=dict)  # named subsets also evaluated
    vocabularies: dict[str, Any] = dataclass_field(default_factory=dict)  # field -> paddle_edo.text.Vocab
    values: dict[str, list] = dataclass_field(default_factory=dict)  # field -> raw values in id order (None: no value)
    plan: Any = None  # a user's files: the DataPlan that maps their raw values (paddle_edo.data.tabular)

    @property
    def fields(self) -> list[FieldSpec]:
        return self.train.fields

    @property
    def dense_features(self) -> list[str]:
        return self.train.dense_features


def split_rows(rows: int, fractions: list[float], seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row indices (int64 arrays) of a seeded random train / valid / test split of ``rows`` rows:
    ``fractions[0]`` and ``fractions[1]`` of them (rounded) for train and valid, the rest for test."""
    order = np.random.default_rng(seed).permutation(rows)
    n_train = int(round(fractions[0] * rows))
    n_valid = int(round(fractions[1] * rows))
    return order[:n_train], order[n_train:n_train + n_valid], order[n_train + n_valid:]


def split_table(table: CTRTable, fractions: list[float], seed: int) -> Splits:
    """A seeded random train / valid / test split (the table's raw values go to the splits)."""
    return Splits(*(table.take(rows) for rows in split_rows(len(table), fractions, seed)), values=table.values)


def count_frequencies(table: "CTRTable | Any") -> dict[str, np.ndarray]:
    """How often each id of each field occurs (padding 0 of multi-valued fields not counted), over a
    table in memory or a streamed split (read once)."""
    counts = {field.name: np.zeros(field.vocab_size, dtype=np.int64) for field in table.fields}
    chunks = [table.ids] if isinstance(table, CTRTable) else table.chunks()
    for chunk in chunks:
        for field in table.fields:
            ids = chunk[field.name].ravel()
            if field.multi_valued:
                ids = ids[ids != 0]
            counts[field.name] += np.bincount(ids, minlength=field.vocab_size)[:field.vocab_size]
    return counts


class CTRBatches(paddle.io.IterableDataset):
    """Yields whole batches (dicts of numpy arrays) of a split held in memory (``CTRTable``) or streamed
    from files (``StreamedSplit``); the order depends only on (seed, epoch)."""

    def __init__(self, table: "CTRTable | Any", batch_size: int, shuffle: bool, seed: int = 0) -> None:
        super().__init__()
        self.table = table
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.skip_batches = 0

    def __len__(self) -> int:
        return -(-len(self.table) // self.batch_size)

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return self.table.iter_batches(self.batch_size, self.shuffle, self.seed, self.epoch, self.skip_batches)


def make_loader(batches: CTRBatches) -> paddle.io.DataLoader:
    """Stream already-batched arrays through paddle.io (conversion to tensors, no re-batching)."""
    return paddle.io.DataLoader(batches, batch_size=None, num_workers=0)
