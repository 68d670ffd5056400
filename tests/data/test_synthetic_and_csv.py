import numpy as np
import pytest

from paddle_edo.data import DataError, load_csv, make_synthetic_ctr, write_csv, zipf_ids


def test_zipf_ids_follow_the_power_law():
    ids = zipf_ids(1000, 400_000, 1.05, np.random.default_rng(0))
    counts = np.bincount(ids, minlength=1000)
    assert ids.min() >= 0 and ids.max() < 1000
    p = np.arange(1, 1001) ** -1.05
    p /= p.sum()
    np.testing.assert_allclose(counts[:5] / len(ids), p[:5], rtol=0.03)
    assert counts[0] / counts[9] == pytest.approx(10 ** 1.05, rel=0.1)


def test_synthetic_data_is_seeded_skewed_and_balanced():
    a = make_synthetic_ctr(20_000, 3, 2000, 1.05, seed=1)
    b = make_synthetic_ctr(20_000, 3, 2000, 1.05, seed=1)
    np.testing.assert_array_equal(a.ids["f0"], b.ids["f0"])
    np.testing.assert_array_equal(a.labels, b.labels)
    assert 0.4 < a.labels.mean() < 0.6
    counts = np.sort(np.bincount(a.ids["f1"], minlength=2000))[::-1]
    assert counts[:20].sum() > 0.3 * len(a)  # 1% of ids take a large share of lookups
    assert a.ids["f0"].min() >= 1 and a.ids["f0"].max() < 2000


def test_csv_round_trip_with_a_multi_valued_field(tmp_path):
    table = make_synthetic_ctr(50, 2, 30, seed=2)
    path = tmp_path / "d.csv"
    write_csv(table, path)
    back = load_csv(path, "label", {"f0": 30, "f1": 30})
    np.testing.assert_array_equal(back.ids["f0"], table.ids["f0"])
    np.testing.assert_array_equal(back.labels, table.labels)
    path.write_text("label,user,tags\n1,3,1|2|5\n0,4,7\n")
    multi = load_csv(path, "label", {"user": 10, "tags": 8})
    np.testing.assert_array_equal(multi.ids["tags"], [[1, 2, 5], [7, 0, 0]])
    assert [f.max_len for f in multi.fields] == [1, 3]


@pytest.mark.parametrize("row,message", [
    ("1,12,1", r"line 3, field 'user': id 12 is out of range \[0, 10\)"),
    ("1,-1,1", r"line 3, field 'user': id -1 is out of range"),
    ("1,3,9", r"line 3, field 'tags': id 9 is out of range \[0, 8\)"),
    ("1,x,1", r"line 3, field 'user': 'x' is not an integer id"),
    ("2,3,1", r"line 3, column 'label': label '2' must be 0 or 1"),
])
def test_bad_ids_name_the_file_line_field_and_value(tmp_path, row, message):
    path = tmp_path / "bad.csv"
    path.write_text("label,user,tags\n0,1,1\n" + row + "\n")
    with pytest.raises(DataError, match=message) as info:
        load_csv(path, "label", {"user": 10, "tags": 8})
    assert str(path) in str(info.value)


def test_missing_file_and_column(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load_csv(tmp_path / "none.csv", "label", {"a": 3})
    path = tmp_path / "d.csv"
    path.write_text("label,a\n1,1\n")
    with pytest.raises(DataError, match="no column 'b'"):
        load_csv(path, "label", {"b": 3})
