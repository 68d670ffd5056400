import gc
import gzip
import inspect
import io
import time
import weakref

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from paddle_edo.data import DataError
from paddle_edo.data import files
from paddle_edo.data.files import BadRows, FileFormat, list_files, read_batches


def rows(path, columns, form=FileFormat(), bad=None):
    bad = bad or BadRows()
    batches = [b for _, b in read_batches(path, form, columns, bad)]
    return pa.Table.from_batches(batches).to_pydict() if batches else {}


def test_folders_globs_and_files_list_data_files_in_order(tmp_path):
    for name in ("day_1", "day_0", ".hidden", "_SUCCESS"):
        (tmp_path / name).write_text("a\n1\n")
    assert [p.name for p in list_files(tmp_path)] == ["day_0", "day_1"]
    assert [p.name for p in list_files(str(tmp_path / "day_*"))] == ["day_0", "day_1"]
    assert list_files(tmp_path / "day_1") == [tmp_path / "day_1"]
    with pytest.raises(DataError, match="no such file or folder"):
        list_files(tmp_path / "none")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match="no data files"):
        list_files(tmp_path / "empty")


def test_csv_cells_are_strings_with_empty_cells_null_and_gzip_reads_the_same(tmp_path):
    text = "label,user,price\n1,u1,2.5\n0,,\n"
    (tmp_path / "d.csv").write_text(text)
    with gzip.open(tmp_path / "d.csv.gz", "wt") as f:
        f.write(text)
    expected = {"label": ["1", "0"], "user": ["u1", None], "price": ["2.5", None]}
    assert rows(tmp_path / "d.csv", ["label", "user", "price"]) == expected
    assert rows(tmp_path / "d.csv.gz", ["label", "user", "price"]) == expected
    (tmp_path / "t.tsv").write_text("1\tu1\n0\tu2\n")
    form = FileFormat(separator="\t", header=False, column_names=("label", "user"))
    assert rows(tmp_path / "t.tsv", ["user"], form) == {"user": ["u1", "u2"]}


def test_parquet_keeps_its_types(tmp_path):
    pq.write_table(pa.table({"label": [1, 0], "user": ["a", "b"], "n": [1.5, None]}), tmp_path / "d.parquet",
                   row_group_size=1)
    got = rows(tmp_path / "d.parquet", ["user", "n"], FileFormat(kind="parquet"))
    assert got == {"user": ["a", "b"], "n": [1.5, None]}
    with pytest.raises(DataError, match="no column 'x'; the file has label, user, n"):
        rows(tmp_path / "d.parquet", ["x"], FileFormat(kind="parquet"))
    (tmp_path / "bad.parquet").write_bytes(b"not parquet")
    with pytest.raises(DataError, match="bad.parquet: not a readable Parquet file"):
        rows(tmp_path / "bad.parquet", ["x"], FileFormat(kind="parquet"))


def test_missing_columns_empty_files_and_short_rows_are_named(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("label,user\n1,a\n")
    with pytest.raises(DataError, match=r"d.csv: no column 'item'; the file has label, user"):
        rows(path, ["item"])
    (tmp_path / "e.csv").write_text("")
    with pytest.raises(DataError, match="e.csv: the file is empty"):
        rows(tmp_path / "e.csv", ["label"])
    path.write_text("label,user\n1,a\n0\n1,c\n")
    with pytest.raises(DataError, match=r"d.csv: line 3: 1 columns where 2 are expected: '0'"):
        rows(path, ["label", "user"])


def test_skipped_rows_are_counted_up_to_the_limit(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("label,user\n1,a\n0\n1,c\n1,d,e\n")
    bad = BadRows(skip=True, limit=5)
    assert rows(path, ["label", "user"], bad=bad) == {"label": ["1", "1"], "user": ["a", "c"]}
    assert bad.count == 2 and "2 bad rows skipped" in bad.summary()
    with pytest.raises(DataError, match="more than data.files.max_bad_rows = 1 bad rows"):
        rows(path, ["label", "user"], bad=BadRows(skip=True, limit=1))


def test_unreadable_files_are_named(tmp_path):
    path = tmp_path / "d.csv"
    path.write_bytes(b"label,user\n1,\xff\xfe\n")
    with pytest.raises(DataError, match=r"d.csv: cannot be read as CSV after data row 0 \(.*UTF8"):
        rows(path, ["label", "user"])
    (tmp_path / "d.csv.gz").write_bytes(b"not gzip at all")
    with pytest.raises(DataError, match=r"d.csv.gz: cannot be read"):
        rows(tmp_path / "d.csv.gz", ["label"])


def row_handler() -> weakref.ref:
    """A weak reference to the one CSV reader's row handler alive."""
    (handler,) = (o for o in gc.get_objects()
                  if inspect.isfunction(o) and o.__qualname__ == "_csv_batches.<locals>.invalid_row")
    return weakref.ref(handler)


class SlowFile(io.FileIO):
    """A file whose reads after the first take a while: pyarrow's read-ahead is still reading when the
    reader is closed."""

    def read(self, size=-1):
        if self.tell():
            time.sleep(0.2)
        return super().read(size)


def test_a_csv_reader_closed_early_has_let_go_of_its_row_handler(tmp_path, monkeypatch):
    """pyarrow's read-ahead tasks hold the reader's Python row handler after it closes; freed on their
    thread while the interpreter exits, it aborts the process. A reader closed early returns only once
    the handler is freed."""
    path = tmp_path / "d.csv"
    path.write_text("label,user\n" + "".join(f"{i % 2},u{i}\n" for i in range(10_000)))
    open_csv, opened = files.pcsv.open_csv, []

    def open_slowly(source, **options):
        opened.append(SlowFile(source))
        return open_csv(opened[-1], **options)

    monkeypatch.setattr(files.pcsv, "open_csv", open_slowly)
    batches = read_batches(path, FileFormat(block_size=1 << 12), ["label", "user"], BadRows())
    next(batches)
    handler, file = row_handler(), weakref.ref(opened.pop())
    batches.close()
    assert handler() is None
    for _ in range(50):  # the read-ahead lets go of this Python file (not a reader's own) a read later
        if file() is None:
            break
        time.sleep(0.1)
    assert file() is None
