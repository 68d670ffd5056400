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
