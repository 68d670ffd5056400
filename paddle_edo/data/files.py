"""Reading a user's files in record batches with pyarrow: CSV/TSV (compressed or not) and Parquet, one
file, a folder of files or a glob; bad rows refused with file and line, or counted and skipped."""
from __future__ import annotations

import glob
import io
import threading
import weakref
from dataclasses import dataclass, field as dataclass_field
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq

from ..errors import DataError

PARQUET_SUFFIXES = (".parquet", ".pq")
EXAMPLES_KEPT = 5
HANDLER_RELEASE_WAIT_S = 10.0  # pyarrow's read-ahead of a block, at most


@dataclass(frozen=True)
class FileFormat:
    """How the files are laid out: ``kind`` csv or parquet; for CSV the separator and the header."""

    kind: str = "csv"
    separator: str = ","
    header: bool = True
    column_names: tuple[str, ...] = ()
    block_size: int = 4 << 20

    def first_line(self) -> int:
        """Line number of the first data row of a CSV file."""
        return 2 if self.header else 1


@dataclass
class BadRows:
    """Rows that cannot be used: refused at once (``skip`` False) or counted and skipped up to a limit."""

    skip: bool = False
    limit: int = 1000
    count: int = 0
    examples: list[str] = dataclass_field(default_factory=list)

    def add(self, where: str, problem: str, number: int = 1) -> None:
        if not self.skip:
            raise DataError(f"{where}: {problem}")
        self.count += number
        if len(self.examples) < EXAMPLES_KEPT:
            self.examples.append(f"{where}: {problem}")
        if self.count > self.limit:
            raise DataError(f"more than data.files.max_bad_rows = {self.limit} bad rows; the first: "
                            + "; ".join(self.examples))

    def summary(self) -> str:
        return f"{self.count} bad rows skipped" + (f" (first: {self.examples[0]})" if self.examples else "")


def list_files(path: str | Path) -> list[Path]:
    """The data files a path names, in sorted order: a file, a folder's files (hidden and _-prefixed ones
    left out, as Spark and Hive write them) or a glob."""
    text = str(path)
    if any(c in text for c in "*?["):
        files = sorted(Path(p) for p in glob.glob(text, recursive=True) if Path(p).is_file())
    elif Path(text).is_dir():
        files = sorted(p for p in Path(text).rglob("*") if p.is_file()
                       and not any(part.startswith((".", "_")) for part in p.relative_to(text).parts))
    elif Path(text).is_file():
        files = [Path(text)]
    else:
        raise DataError(f"data.files.path = {text!r}: no such file or folder")
    if not files:
        raise DataError(f"data.files.path = {text!r}: no data files there")
    return files


def file_kind(path: Path, configured: str) -> str:
    """csv or parquet: as configured, or by the file's suffix."""
    if configured != "auto":
        return configured
    return "parquet" if path.suffix.lower() in PARQUET_SUFFIXES else "csv"


def read_batches(path: Path, form: FileFormat, columns: list[str], bad_rows: BadRows
                 ) -> Iterator[tuple[int, pa.RecordBatch]]:
    """(index of the batch's first row in the file, batch of the named columns); CSV cells are strings
    (empty cells null), Parquet columns keep their types."""
    if form.kind == "parquet":
        yield from _parquet_batches(path, columns)
    else:
        yield from _csv_batches(path, form, columns, bad_rows)


def _parquet_batches(path: Path, columns: list[str]) -> Iterator[tuple[int, pa.RecordBatch]]:
    try:
        reader = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"{path}: not a readable Parquet file ({exc})") from None
    missing = [c for c in columns if c not in reader.schema_arrow.names]
    if missing:
        raise DataError(f"{path}: no column {missing[0]!r}; the file has {', '.join(reader.schema_arrow.names)}")
    row = 0
    for group in range(reader.num_row_groups):
        try:
            table = reader.read_row_group(group, columns=columns)
        except (pa.ArrowException, OSError) as exc:
            raise DataError(f"{path}: row group {group} cannot be read ({exc})") from None
        for batch in table.to_batches():
            yield row, batch
            row += batch.num_rows


def _csv_batches(path: Path, form: FileFormat, columns: list[str], bad_rows: BadRows
                 ) -> Iterator[tuple[int, pa.RecordBatch]]:
    if path.stat().st_size == 0:
        raise DataError(f"{path}: the file is empty")
    names = _csv_column_names(path, form)
    missing = [c for c in columns if c not in names]
    if missing:
        raise DataError(f"{path}: no column {missing[0]!r}; the file has {', '.join(names)}")

    refused: list[DataError] = []  # pyarrow ignores exceptions raised in the handler: kept, raised below

    def invalid_row(row) -> str:
        problem = f"{row.actual_columns} columns where {row.expected_columns} are expected: {row.text[:200]!r}"
        if not bad_rows.skip:
            refused.append(DataError(f"{path}: line {_line_of(path, row.text)}: {problem}"))
            return "error"
        try:
            bad_rows.add(str(path), problem)
        except DataError as exc:
            refused.append(exc.with_traceback(None))  # a traceback would hold this handler alive
            return "error"
        return "skip"

    handler_released = threading.Event()
    handler_watch = weakref.ref(invalid_row, lambda _: handler_released.set())
    read = pcsv.ReadOptions(block_size=form.block_size, column_names=list(form.column_names) or None,
                            use_threads=True)
    parse = pcsv.ParseOptions(delimiter=form.separator, invalid_row_handler=invalid_row)
    convert = pcsv.ConvertOptions(include_columns=columns, column_types={c: pa.string() for c in columns},
                                  strings_can_be_null=True, quoted_strings_can_be_null=True)
    row, reader = 0, None
    try:
        reader = pcsv.open_csv(path, read_options=read, parse_options=parse, convert_options=convert)
        for batch in reader:
            yield row, batch
            row += batch.num_rows
    except (pa.ArrowException, OSError) as exc:
        if refused:
            raise refused[0] from None
        raise DataError(f"{path}: cannot be read as CSV after data row {row} ({exc})") from None
    finally:
        # A reader closed before the end of its file leaves read-ahead tasks on pyarrow's threads, and the
        # last of them frees the Python handler, which takes the GIL; done while the interpreter exits,
        # that aborts the process ("terminate called without an active exception"). So the handler's
        # release is awaited here.
        if reader is not None:
            reader.close()
        del reader, parse, invalid_row
        handler_released.wait(HANDLER_RELEASE_WAIT_S)
        del handler_watch


def column_names(path: Path, form: FileFormat) -> list[str]:
    """The columns of a CSV or Parquet file."""
    if form.kind == "parquet":
        return list(pq.ParquetFile(path).schema_arrow.names)
    return _csv_column_names(path, form)


def _csv_column_names(path: Path, form: FileFormat) -> list[str]:
    """The column names: given (files without a header) or the header's, refused when the file has no rows."""
    if form.column_names and not form.header:
        return list(form.column_names)
    first = first_line_cells(path, form.separator)
    if not any(first):
        raise DataError(f"{path}: the first line is empty; expected a header row")
    return [name.strip().strip('"') for name in first]


def first_line_cells(path: Path, separator: str) -> list[str]:
    """The cells of a CSV file's first line (compressed files read as they are)."""
    try:
        with pa.input_stream(str(path), compression="detect") as stream:
            first = io.TextIOWrapper(stream, encoding="utf-8", errors="replace").readline()
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"{path}: cannot be read ({exc})") from None
    return first.rstrip("\r\n").split(separator)


def _line_of(path: Path, text: str) -> int | str:
    """The line that holds a bad row's text (read again only when the row is refused)."""
    with pa.input_stream(str(path), compression="detect") as stream:
        for number, line in enumerate(io.TextIOWrapper(stream, encoding="utf-8", errors="replace"), start=1):
            if line.rstrip("\r\n") == text:
                return number
    return "?"
