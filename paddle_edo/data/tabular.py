"""A user's table as model inputs: the ``data.files`` settings resolved (``TabularSource``), one streamed
pass over the files that learns vocabularies, numeric statistics and split sizes (``DataPlan``, saved
beside the run), and the encoding of record batches into id fields, dense features and labels."""
from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .columns import CategoricalColumn, LabelRule, NumericColumn, categorical_columns, numeric_columns, to_numbers
from ..errors import DataError
from .ctr import FieldSpec
from .files import BadRows, FileFormat, column_names, file_kind, first_line_cells, list_files, read_batches
from .hashing import mix64, stable_hash
from .numeric import NumericFeature, NumericStats
from .vocabulary import ValueCounter, Vocabulary, as_strings, map_distinct, write_json_atomically

logger = logging.getLogger("paddle_edo")

SPLITS = ("train", "valid", "test")
PLAN_FILE = "plan.json"
PLAN_VERSION = 1
# data.files keys that decide how raw values become inputs: a saved plan serves only the same ones
MAPPING_KEYS = ("format", "separator", "header", "column_names", "label", "categorical", "numeric", "ids",
                "min_count", "max_size", "max_values", "numeric_transform", "num_buckets", "split_by")
CRITEO_LABEL = "label"
CRITEO_NUMERIC = tuple(f"I{i}" for i in range(1, 14))
CRITEO_CATEGORICAL = tuple(f"C{i}" for i in range(1, 27))
CRITEO_COLUMNS = (CRITEO_LABEL, *CRITEO_NUMERIC, *CRITEO_CATEGORICAL)


def criteo_section(section: dict[str, Any]) -> dict[str, Any]:
    """The ``data.files`` section as Criteo's files need it: tab-separated, no header, label, I1-I13
    numeric, C1-C26 categorical; keys the user set to other than their defaults keep the user's values."""
    resolved = dict(section)
    resolved.update(separator="\t", header=False, column_names=list(CRITEO_COLUMNS), label=CRITEO_LABEL)
    if not section["categorical"]:
        resolved["categorical"] = list(CRITEO_CATEGORICAL)
    if not section["numeric"]:
        resolved["numeric"] = list(CRITEO_NUMERIC)
    return resolved


@dataclass(frozen=True)
class TabularSource:
    """Where the rows are and what each column becomes, from a validated ``data`` config section."""

    path: str
    files: tuple[Path, ...]
    form: FileFormat
    kinds: tuple[str, ...]
    label: LabelRule | None  # None: rows without labels (serving)
    categorical: tuple[CategoricalColumn, ...]
    numeric: tuple[NumericColumn, ...]
    fractions: tuple[float, float, float]
    seed: int
    split_by: str
    bad_rows: str
    max_bad_rows: int
    mapping: dict[str, Any]

    @classmethod
    def from_config(cls, data: dict[str, Any], path: str | None = None) -> "TabularSource":
        """The source a validated ``data`` section describes; ``path``: other files of the same layout
        (rows to serve), read with all columns but the label optional."""
        section = criteo_section(data["files"]) if data["name"] == "criteo" else data["files"]
        files = tuple(list_files(path or section["path"]))
        form = FileFormat("csv", section["separator"], section["header"], tuple(section["column_names"]),
                          section["block_size"])
        mapping = {key: section[key] for key in MAPPING_KEYS}
        mapping.update(name=data["name"], split=list(data["split"]), seed=data["seed"])
        configured = "parquet" if data["name"] == "parquet" else section["format"]
        kinds = tuple(file_kind(f, configured) for f in files)
        label = LabelRule.parse(section["label"])
        if path is not None:  # rows to serve may come without the label column
            if kinds[0] == "csv" and not form.header and label.column in form.column_names and \
                    len(first_line_cells(files[0], form.separator)) == len(form.column_names) - 1:
                form = replace(form, column_names=tuple(c for c in form.column_names if c != label.column))
            if label.column not in column_names(files[0], replace(form, kind=kinds[0])):
                label = None
        source = cls(path or section["path"], files, form, kinds, label, tuple(categorical_columns(section)),
                     tuple(numeric_columns(section)), tuple(data["split"]), data["seed"], section["split_by"],
                     section["bad_rows"], section["max_bad_rows"], mapping)
        names = source.columns
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise DataError(f"data.files: column {twice[0]!r} is named more than once (label, categorical, numeric)")
        if source.split_by == "file":
            source.file_splits()  # refuses too few files
        return source

    @property
    def columns(self) -> list[str]:
        """Every column read, label first."""
        label = [self.label.column] if self.label is not None else []
        return [*label, *(c.name for c in self.categorical), *(c.name for c in self.numeric)]

    def fingerprint(self) -> list[list[Any]]:
        """Name, size and modification time of each file: a plan made from other bytes recounts its rows."""
        return [[str(f), f.stat().st_size, f.stat().st_mtime_ns] for f in self.files]

    def new_bad_rows(self) -> BadRows:
        return BadRows(skip=self.bad_rows == "skip", limit=self.max_bad_rows)

    def file_splits(self) -> np.ndarray:
        """split_by file: each file's split, the last files for test and valid, as day files are used."""
        n = len(self.files)
        test = max(1, int(round(self.fractions[2] * n)))
        valid = max(1, int(round(self.fractions[1] * n)))
        if test + valid >= n:
            raise DataError(f"data.files.split_by = 'file': {n} files leave none for training with data.split = "
                            f"{list(self.fractions)}")
        return np.array([0] * (n - test - valid) + [1] * valid + [2] * test, dtype=np.int64)

    def split_codes(self, file_index: int, first_row: int, rows: int) -> np.ndarray:
        """0 train, 1 valid, 2 test for rows first_row.. of a file: by a seeded hash of (file name before
        its first dot, row), so a row's split does not depend on the other files, the batch size, the
        reader or the file's format and compression (day_0.csv and day_0.parquet split alike)."""
        if self.split_by == "file":
            return np.full(rows, self.file_splits()[file_index], dtype=np.int64)
        name = stable_hash(pa.array([self.files[file_index].name.split(".")[0]])).astype(np.uint64)[0]
        key = mix64(np.array([name ^ np.uint64(self.seed)], dtype=np.uint64))[0]
        mixed = mix64(key + np.arange(first_row, first_row + rows, dtype=np.uint64))
        uniform = (mixed >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
        return (uniform >= self.fractions[0]).astype(np.int64) + (uniform >= self.fractions[0] + self.fractions[1])

    def batches(self, bad: BadRows) -> Iterator[tuple[int, int, pa.RecordBatch]]:
        """(file index, first row in the file, batch of the columns read) over every file in order."""
        for index, (path, kind) in enumerate(zip(self.files, self.kinds)):
            form = FileFormat(kind, self.form.separator, self.form.header, self.form.column_names,
                              self.form.block_size)
            for first_row, batch in read_batches(path, form, self.columns, bad):
                yield index, first_row, batch

    def where(self, file_index: int, row: int) -> str:
        """A row's place for messages: file and line (CSV) or row (Parquet)."""
        path = self.files[file_index]
        if self.kinds[file_index] == "parquet":
            return f"{path}: row {row}"
        return f"{path}: line {row + self.form.first_line()}"


@dataclass
class Parsed:
    """A batch's good rows with their labels, numbers and given ids parsed (given ids: [N], or [N, the
    batch's longest cell] for a multi-valued column, padded with 0)."""

    batch: pa.RecordBatch
    labels: np.ndarray
    numbers: dict[str, np.ndarray]
    splits: np.ndarray
    given: dict[str, np.ndarray]

    def take(self, rows: np.ndarray) -> "Parsed":
        """The parsed rows at these positions (boolean mask or indices)."""
        batch = self.batch.filter(pa.array(rows)) if rows.dtype == bool else self.batch.take(rows)
        return Parsed(batch, self.labels[rows], {k: v[rows] for k, v in self.numbers.items()}, self.splits[rows],
                      {k: v[rows] for k, v in self.given.items()})


def parse(source: TabularSource, file_index: int, first_row: int, batch: pa.RecordBatch, bad: BadRows,
          given_bounds: dict[str, int], positions: np.ndarray | None = None,
          splits: np.ndarray | None = None) -> Parsed:
    """Check every cell the model needs; a bad row is refused (file, line, column, value) or dropped.
    When the batch holds some of the rows read from the file: ``positions``, their places there, and
    ``splits``, their splits."""
    rows = batch.num_rows
    if positions is None:
        positions, splits = np.arange(rows), source.split_codes(file_index, first_row, rows)
    dropped = np.zeros(rows, dtype=bool)

    def refuse(mask: np.ndarray, column: str, values: pa.Array, problem: str) -> None:
        new = mask & ~dropped
        if not new.any():
            return
        first = int(np.flatnonzero(new)[0])
        value = values[first].as_py()
        where = f"{source.where(file_index, first_row + int(positions[first]))}, column {column!r}"
        if not bad.skip:
            raise DataError(f"{where}: {value!r} {problem}")
        bad.add(where, f"{value!r} {problem}", int(new.sum()))
        dropped[new] = True

    if source.label is not None:
        label_values = batch.column(source.label.column)
        labels, bad_labels = source.label.apply(label_values)
        refuse(bad_labels, source.label.column, label_values, f"is not a label of {source.label.describe()}")
    else:
        labels = np.zeros(rows, dtype=np.float32)
    numbers = {}
    for column in source.numeric:
        values = batch.column(column.name)
        numbers[column.name], bad_numbers = to_numbers(values)
        refuse(bad_numbers, column.name, values, "is not a number")
    given = {}
    for name, bound in given_bounds.items():
        column = next(c for c in source.categorical if c.name == name)
        values = batch.column(name)
        given[name], bad_ids = _given_ids(values, column.separator)
        refuse(bad_ids | ((given[name] < 0) | (given[name] >= bound)).reshape(rows, -1).any(axis=1), name, values,
               f"is not an integer id in [0, {bound})")
    parsed = Parsed(batch, labels, numbers, splits, given)
    return parsed.take(~dropped) if dropped.any() else parsed


def _given_ids(values: pa.Array, separator: str | None) -> tuple[np.ndarray, np.ndarray]:
    """Integer ids written in the cells ([N], or the cells' values flattened per row padded -1 -> checked
    as [N, longest]), with the rows whose cells are not integers."""
    if separator is None:
        numbers, bad = to_numbers(values)
        bad |= ~np.isnan(numbers) & (numbers != np.round(numbers))
        return np.where(np.isnan(numbers) | bad, 0, numbers).astype(np.int64), bad
    flat, row, position, rows = split_cells(values, separator)
    numbers, bad_flat = to_numbers(flat)
    bad_flat |= ~np.isnan(numbers) & (numbers != np.round(numbers))
    ids = np.zeros((rows, int(position.max()) + 1 if position.size else 1), dtype=np.int64)
    ids[row, position] = np.where(np.isnan(numbers) | bad_flat, 0, numbers).astype(np.int64)
    bad = np.zeros(rows, dtype=bool)
    bad[row[bad_flat]] = True
    return ids, bad


def split_cells(values: pa.Array, separator: str) -> tuple[pa.Array, np.ndarray, np.ndarray, int]:
    """A multi-valued column's values flattened (strings, empty ones null), with each value's row and
    position in its cell, and the number of rows."""
    cells = as_strings(values)
    lists = pc.split_pattern(cells, separator)
    lengths = np.asarray(pc.fill_null(pc.list_value_length(lists), 0), dtype=np.int64)
    flat = as_strings(pc.list_flatten(lists))
    row = np.repeat(np.arange(len(cells)), lengths)
    starts = np.cumsum(lengths) - lengths
    return flat, row, np.arange(len(row)) - starts[row], len(cells)


class DataPlan:
    """What the training split taught about the columns: fields and their sizes, vocabularies, numeric
    transforms, rows per split. ``encode`` turns parsed rows into model inputs the same way in training,
    evaluation, export and serving."""

    def __init__(self, source: TabularSource, vocabularies: dict[str, Vocabulary], sizes: dict[str, int],
                 lengths: dict[str, int], numeric: dict[str, NumericFeature], rows: dict[str, int]) -> None:
        self.source = source
        self.vocabularies, self.sizes, self.lengths = vocabularies, sizes, lengths
        self.numeric, self.rows = numeric, rows
        self.fields = [FieldSpec(c.name, sizes[c.name], lengths.get(c.name, 1)) for c in source.categorical]
        self.fields += [FieldSpec(c.name, numeric[c.name].num_ids) for c in source.numeric if c.bucketized]
        self.dense_features = [c.name for c in source.numeric if not c.bucketized]

    def given_bounds(self) -> dict[str, int]:
        return {c.name: c.num_embeddings for c in self.source.categorical if c.ids == "given"}

    def parse(self, file_index: int, first_row: int, batch: pa.RecordBatch, bad: BadRows,
              positions: np.ndarray | None = None, splits: np.ndarray | None = None) -> Parsed:
        return parse(self.source, file_index, first_row, batch, bad, self.given_bounds(), positions, splits)

    def encode(self, parsed: Parsed) -> dict[str, np.ndarray]:
        """Model inputs of parsed rows: one int64 id array per field ([N] or [N, max_len]), ``dense``
        float32 [N, K] when there are dense features, ``label`` float32 [N]."""
        batch, rows = parsed.batch, parsed.batch.num_rows
        arrays: dict[str, np.ndarray] = {}
        for column in self.source.categorical:
            values = batch.column(column.name)
            if column.separator is None:
                arrays[column.name] = parsed.given[column.name] if column.ids == "given" else self._ids(column, values)
                continue
            width = self.lengths[column.name]
            ids = np.zeros((rows, width), dtype=np.int64)
            if column.ids == "given":
                cells = parsed.given[column.name][:, :width]
                ids[:, :cells.shape[1]] = cells
            else:
                flat, row, position, _ = split_cells(values, column.separator)
                keep = position < width
                ids[row[keep], position[keep]] = self._ids(column, flat)[keep]
            arrays[column.name] = ids if width > 1 else ids[:, 0]  # training saw one value a cell at most
        for column in self.source.numeric:
            if column.bucketized:
                arrays[column.name] = self.numeric[column.name].transform(parsed.numbers[column.name])
        if self.dense_features:
            arrays["dense"] = (np.stack([self.numeric[n].transform(parsed.numbers[n]) for n in self.dense_features],
                                        axis=1) if rows else np.zeros((0, len(self.dense_features)), np.float32))
        arrays["label"] = parsed.labels
        return arrays

    def _ids(self, column: CategoricalColumn, values: pa.Array) -> np.ndarray:
        """Ids of raw values by vocabulary or hash (given ids come parsed)."""
        if column.ids == "hash":
            return map_distinct(as_strings(values), stable_hash)
        return self.vocabularies[column.name].ids(values)

    # ------------------------------------------------------------ persistence
    def save(self, folder: Path) -> Path:
        """plan.json and one vocabulary file per column, each written atomically (the plan last); returns
        the folder."""
        vocabularies = {}
        for name, vocabulary in self.vocabularies.items():
            file = f"vocabulary.{name}.parquet"
            vocabularies[name] = {"file": file, "sha256": vocabulary.save(folder / file), "size": vocabulary.size}
        write_json_atomically(folder / PLAN_FILE, {
            "version": PLAN_VERSION, "mapping": self.source.mapping, "fingerprint": self.source.fingerprint(),
            "rows": self.rows, "sizes": self.sizes, "lengths": self.lengths,
            "numeric": {name: feature.state() for name, feature in self.numeric.items()},
            "vocabularies": vocabularies})
        return folder

    @classmethod
    def load(cls, source: TabularSource, folder: Path, recount: bool = True) -> "DataPlan | None":
        """The plan saved in ``folder`` for this source (None if there is none); one saved for other
        settings is refused, naming the setting; one for other file bytes recounts the rows (``recount``;
        serving other files keeps the saved counts)."""
        path = folder / PLAN_FILE
        if not path.is_file():
            return None
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise DataError(f"data plan {path} cannot be read ({exc}); delete {folder} to prepare the data again") \
                from None
        if saved.get("version") != PLAN_VERSION:
            raise DataError(f"data plan {path} has version {saved.get('version')!r}, expected {PLAN_VERSION}; "
                            f"delete {folder} to prepare the data again")
        mapping = json_round_trip(source.mapping)
        differing = [k for k in mapping if saved["mapping"].get(k) != mapping[k]]
        if differing:
            key = differing[0]
            raise DataError(f"data plan {path} was prepared with data.files.{key} = {saved['mapping'].get(key)!r}, "
                            f"not {mapping[key]!r}: the run's vocabularies belong to its settings; use another "
                            f"train.output_dir or delete {folder}")
        vocabularies = {name: Vocabulary.load(folder / entry["file"], name, entry["sha256"])
                        for name, entry in saved["vocabularies"].items()}
        numeric = {c.name: NumericFeature(c, saved["numeric"][c.name]["mean"], saved["numeric"][c.name]["std"],
                                          tuple(saved["numeric"][c.name]["boundaries"])) for c in source.numeric}
        plan = cls(source, vocabularies, saved["sizes"], saved["lengths"], numeric, saved["rows"])
        if recount and saved["fingerprint"] != json_round_trip(source.fingerprint()):
            logger.info("data: %s changed since %s was made; counting its rows again (vocabularies kept)",
                        source.path, path)
            plan.rows = count_rows(plan)
            plan.save(folder)
        return plan


def json_round_trip(value: Any) -> Any:
    return json.loads(json.dumps(value))


def count_rows(plan: DataPlan) -> dict[str, int]:
    """Good rows per split, in one pass over the files."""
    bad = plan.source.new_bad_rows()
    rows = np.zeros(3, dtype=np.int64)
    with contextlib.closing(plan.source.batches(bad)) as batches:
        for file_index, first_row, batch in batches:
            rows += np.bincount(plan.parse(file_index, first_row, batch, bad).splits, minlength=3)
    return dict(zip(SPLITS, (int(r) for r in rows)))


def build_plan(source: TabularSource) -> DataPlan:
    """One pass over the files: rows per split, and on the training split the value counts, distinct
    values, longest multi-valued cells and numeric statistics."""
    bad = source.new_bad_rows()
    given = {c.name: c.num_embeddings for c in source.categorical if c.ids == "given"}
    counted = {c.name: ValueCounter() for c in source.categorical
               if c.ids == "vocabulary" or (c.ids == "hash" and c.num_embeddings is None)}
    longest = {c.name: 0 for c in source.categorical if c.multi_valued}
    stats = {c.name: NumericStats() for c in source.numeric}
    rng = np.random.default_rng(source.seed)
    rows = np.zeros(3, dtype=np.int64)
    with contextlib.closing(source.batches(bad)) as batches:
        for file_index, first_row, batch in batches:
            parsed = parse(source, file_index, first_row, batch, bad, given)
            rows += np.bincount(parsed.splits, minlength=3)
            train = parsed.splits == 0
            if not train.any():
                continue
            rows_of_train = parsed.batch.filter(pa.array(train))
            for column in source.categorical:
                values = rows_of_train.column(column.name)
                if column.multi_valued:
                    flat, _, position, _ = split_cells(values, column.separator)
                    longest[column.name] = max(longest[column.name], int(position.max()) + 1 if position.size else 0)
                    values = flat
                if column.name in counted:
                    counted[column.name].add(as_strings(values))
            for name, numbers in parsed.numbers.items():
                stats[name].update(numbers[train], rng)
    if bad.count:
        logger.warning("data: %s", bad.summary())
    if rows[0] == 0:
        raise DataError(f"data.files.path = {source.path!r}: no training rows (rows per split: "
                        f"{dict(zip(SPLITS, rows.tolist()))})")
    vocabularies, sizes = {}, {}
    for column in source.categorical:
        if column.ids == "vocabulary":
            vocabularies[column.name] = Vocabulary.build(column.name, counted[column.name].counts(),
                                                         column.min_count, column.max_size)
            sizes[column.name] = vocabularies[column.name].size
        elif column.ids == "hash" and column.num_embeddings is None:
            sizes[column.name] = max(2, counted[column.name].counts().num_rows + 1)
        else:
            sizes[column.name] = column.num_embeddings
    # a multi-valued column whose training cells hold one value at most is a single-valued field
    lengths = {name: max(1, min(n, next(c.max_values for c in source.categorical if c.name == name)))
               for name, n in longest.items()}
    numeric = {c.name: NumericFeature.fit(c, stats[c.name]) for c in source.numeric}
    return DataPlan(source, vocabularies, sizes, lengths, numeric, dict(zip(SPLITS, (int(r) for r in rows))))


def prepare_plan(source: TabularSource, folder: Path | None) -> DataPlan:
    """The run's saved plan, or a new one (saved when there is a folder)."""
    plan = DataPlan.load(source, folder) if folder is not None else None
    if plan is None:
        plan = build_plan(source)
        if folder is not None:
            plan.save(folder)
    return plan

