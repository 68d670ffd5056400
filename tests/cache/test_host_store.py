import json

import numpy as np
import pytest

from paddle_edo.cache import HostStore


@pytest.mark.parametrize("kind", ["memory", "mmap"])
def test_rows_and_their_state_are_read_and_written_together(tmp_path, kind):
    store = HostStore(50, 3, kind, tmp_path / "t.f32" if kind == "mmap" else None, init_std=0.5, seed=1, zero_row=0)
    assert store.read(np.array([0]))[0, 0].tolist() == [0.0, 0.0, 0.0] and store.column("weight")[1:].std() > 0.3
    store.set_states({"moment1": 0.0, "moment2": 1.0})
    assert store.names == ["weight", "moment1", "moment2"] and store.nbytes == 50 * 3 * 3 * 4
    weights = store.column("weight").copy()
    rows = np.arange(2 * 3 * 3, dtype=np.float32).reshape(2, 3, 3)
    store.write(np.array([4, 9]), rows)
    np.testing.assert_array_equal(store.read(np.array([9, 4])), rows[::-1])
    store.write(np.array([5]), rows[:1, :1])              # the weight alone: the state stays
    np.testing.assert_array_equal(store.read(np.array([5]))[0], [rows[0, 0], [0, 0, 0], [1, 1, 1]])
    np.testing.assert_array_equal(np.delete(store.column("weight"), [4, 5, 9], 0), np.delete(weights, [4, 5, 9], 0))


def test_a_mapped_file_reopens_with_its_rows_and_layout(tmp_path):
    path = tmp_path / "t.f32"
    store = HostStore(20, 2, "mmap", path, seed=3)
    store.set_states({"moment": 0.5})
    store.write(np.array([7]), np.full((1, 2, 2), 9.0, np.float32))
    store.flush()
    assert json.loads(path.with_name("t.f32.json").read_text())["names"] == ["weight", "moment"]
    reopened = HostStore(20, 2, "mmap", path, seed=99)
    np.testing.assert_array_equal(reopened.read(np.array([7])), np.full((1, 2, 2), 9.0))
    fresh = HostStore(20, 2, "mmap", path, seed=99, reopen=False)
    assert fresh.names == ["weight"] and not np.array_equal(fresh.column("weight"), store.column("weight"))
    with pytest.raises(ValueError, match=r"holds 160 bytes, but a 30 x 2 float32 table with \[.weight.\] per row takes 240"):
        HostStore(30, 2, "mmap", path)


def test_fill_gives_the_initial_rows_chunk_by_chunk():
    calls = []

    def fill(rows, dim):
        calls.append(rows)
        return np.full((rows, dim), 0.25)

    store = HostStore(1000, 4, fill=fill, zero_row=3)
    assert sum(calls) == 1000
    assert np.all(np.delete(store.column("weight"), 3, 0) == 0.25) and np.all(store.column("weight")[3] == 0)


def test_bad_settings_name_the_owner():
    with pytest.raises(ValueError, match="my table: host = 'disk'; expected one of 'memory', 'mmap'"):
        HostStore(10, 2, "disk", owner="my table")
    with pytest.raises(ValueError, match="host = 'mmap' needs a path"):
        HostStore(10, 2, "mmap")


@pytest.mark.parametrize("kind", ["memory", "mmap"])
def test_packed_rows_are_written_as_a_low_precision_table_writes_its_rows(tmp_path, kind):
    """An int8 store's records are the codes and row parameters a low_precision int8 table holds: fresh
    rows rounded to nearest, written rows stochastically with the same keyed noise (the same bytes)."""
    import paddle

    from paddle_edo.nn import QuantizedEmbedding
    from paddle_edo.quant.row_records import RowRecords

    records = RowRecords("int8", 8)
    store = HostStore(40, 8, kind, tmp_path / "t.int8" if kind == "mmap" else None, seed=2, zero_row=0,
                      records=records, global_rows=(1, 3))  # rank 1 of 3's share: rows 1, 4, 7, ... of the table
    assert store.nbytes == 40 * (8 + 4) and store.names == ["weight"]
    np.testing.assert_array_equal(store.read(np.array([0]))[0, 0], np.zeros(8))
    table = QuantizedEmbedding(120, 8, "int8", "low_precision")  # the whole table: 3 x 40 rows
    ids, rows = np.array([3, 17, 39]), np.random.default_rng(0).normal(0, 0.1, (3, 8)).astype(np.float32)
    paddle.seed(11)
    store.write(ids, rows[:, None])
    paddle.seed(11)
    table._write_rows(paddle.to_tensor(1 + 3 * ids), paddle.to_tensor(rows))
    codes, params = records.split(np.asarray(store.array)[ids])
    np.testing.assert_array_equal(codes, table.codes.numpy()[1 + 3 * ids])
    np.testing.assert_array_equal(params, table.row_params.numpy()[1 + 3 * ids])
    np.testing.assert_array_equal(store.read(ids)[:, 0], table.decode_rows(paddle.to_tensor(1 + 3 * ids)).numpy())
    assert np.abs(store.read(ids)[:, 0] - rows).max() < 0.01
    with pytest.raises(Exception, match="packed host rows keep no optimizer state"):
        store.set_states({"moment1": 0.0})


def test_a_packed_file_reopens_as_it_is_and_one_of_another_size_is_refused(tmp_path):
    from paddle_edo.errors import EdoValueError
    from paddle_edo.quant.row_records import RowRecords

    path = tmp_path / "t.int8"
    store = HostStore(20, 4, "mmap", path, seed=3, records=RowRecords("int8", 4))
    store.write(np.array([7]), np.full((1, 1, 4), 0.5, np.float32))
    store.flush()
    saved = np.asarray(store.array).copy()
    reopened = HostStore(20, 4, "mmap", path, seed=9, records=RowRecords("int8", 4))
    np.testing.assert_array_equal(np.asarray(reopened.array), saved)
    with pytest.raises(EdoValueError, match="table of 12-byte records takes 240"):
        HostStore(20, 8, "mmap", path, records=RowRecords("int8", 8))
