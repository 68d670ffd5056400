import gzip

import numpy as np
import pytest

from paddle_edo.config import load_config
from paddle_edo.data import load_dataset, write_criteo_synthetic
from paddle_edo.data.criteo import zipf_ranks


def test_zipf_ranks_follow_the_power_law_at_any_cardinality():
    ranks = zipf_ranks(10_000_000, 1.05, np.random.default_rng(0).random(1_000_000))
    assert ranks.min() >= 0 and ranks.max() < 10_000_000
    counts = np.bincount(ranks[ranks < 100])
    assert counts[0] / counts[9] == pytest.approx(10 ** 1.05, rel=0.25)
    assert zipf_ranks(3, 1.05, np.array([0.0, 0.999999])).tolist() == [0, 2]


def test_files_are_in_criteo_format(tmp_path):
    (plain,) = write_criteo_synthetic(tmp_path / "plain", 2000, seed=3)
    lines = plain.read_text().splitlines()
    assert len(lines) == 2000
    cells = [line.split("\t") for line in lines]
    assert {len(c) for c in cells} == {40}
    assert {c[0] for c in cells} == {"0", "1"}
    hexes = [v for c in cells for v in c[14:] if v]
    assert all(len(v) == 8 and int(v, 16) >= 0 for v in hexes)
    assert sum(not v for c in cells for v in c[1:]) > 0          # missing cells are empty
    assert any(c[2].startswith("-") for c in cells)              # I2 has negative counts
    gz = write_criteo_synthetic(tmp_path / "gz", 2000, files=2, seed=3, compress=True)
    assert [p.name for p in gz] == ["day_0.gz", "day_1.gz"]
    plain_days = write_criteo_synthetic(tmp_path / "plain2", 2000, files=2, seed=3)
    with gzip.open(gz[0], "rt") as f:
        assert f.read() == plain_days[0].read_text()          # same seed, same rows


def test_criteo_reads_as_published_and_as_a_csv_config(tmp_path):
    write_criteo_synthetic(tmp_path, 3000, files=2, seed=3, compress=True)
    criteo = load_dataset(load_config(base={"data": {"name": "criteo", "files": {"path": str(tmp_path)}}})["data"])
    assert [f.name for f in criteo.fields] == [f"C{i}" for i in range(1, 27)]
    assert criteo.dense_features == [f"I{i}" for i in range(1, 14)]
    columns = ["label"] + [f"I{i}" for i in range(1, 14)] + [f"C{i}" for i in range(1, 27)]
    as_csv = load_dataset(load_config(base={"data": {"name": "csv", "files": {
        "path": str(tmp_path), "separator": "\t", "header": False, "column_names": columns,
        "categorical": columns[14:], "numeric": columns[1:14]}}})["data"])
    for split in ("train", "test"):
        a, b = getattr(criteo, split), getattr(as_csv, split)
        np.testing.assert_array_equal(a.labels, b.labels)
        np.testing.assert_array_equal(a.dense, b.dense)
        np.testing.assert_array_equal(a.ids["C3"], b.ids["C3"])
    assert 0.15 < criteo.train.labels.mean() < 0.45
