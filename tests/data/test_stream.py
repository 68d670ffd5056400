import numpy as np
import pyarrow.csv as pcsv
import pytest

from paddle_edo.config import load_config
from paddle_edo.data import CTRBatches, DataError, StreamedSplit, TabularSource, count_frequencies, load_dataset
from paddle_edo.data import stream
from paddle_edo.data.stream import load_tables
from paddle_edo.data.synthetic import make_raw_clicks
from paddle_edo.data.tabular import build_plan


@pytest.fixture(scope="module")
def plan(tmp_path_factory):
    path = tmp_path_factory.mktemp("stream") / "clicks.csv"
    pcsv.write_csv(make_raw_clicks(5000, num_users=400), path)
    config = load_config(base={"data": {"name": "csv", "files": {
        "path": str(path), "label": "click", "block_size": 16384,
        "categorical": {"user": None, "tags": {"separator": "|"}}, "numeric": ["price"]}}})
    return build_plan(TabularSource.from_config(config["data"]))


def rows_of(batches):
    batches = list(batches)
    return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


def test_an_unshuffled_stream_is_the_split_in_memory_in_order(plan):
    tables = load_tables(plan)
    for split in ("train", "test"):
        streamed = rows_of(StreamedSplit(plan, split).iter_batches(128, shuffle=False, seed=0, epoch=0))
        table = tables[split]
        np.testing.assert_array_equal(streamed["user"], table.ids["user"])
        np.testing.assert_array_equal(streamed["tags"], table.ids["tags"])
        np.testing.assert_array_equal(streamed["dense"], table.dense)
        np.testing.assert_array_equal(streamed["label"], table.labels)


def test_shuffled_streams_hold_every_row_once_in_an_order_set_by_seed_and_epoch(plan):
    split = StreamedSplit(plan, "train", shuffle_buffer=500)
    first = list(split.iter_batches(100, shuffle=True, seed=1, epoch=0))
    assert all(len(b["label"]) == 100 for b in first[:-1]) and len(first) == -(-len(split) // 100)
    again = rows_of(split.iter_batches(100, shuffle=True, seed=1, epoch=0))
    other = rows_of(split.iter_batches(100, shuffle=True, seed=1, epoch=1))
    ordered = rows_of(split.iter_batches(100, shuffle=False, seed=1, epoch=0))
    np.testing.assert_array_equal(rows_of(first)["dense"], again["dense"])
    assert not np.array_equal(other["dense"], again["dense"])
    np.testing.assert_array_equal(np.sort(again["dense"][:, 0]), np.sort(ordered["dense"][:, 0]))
    resumed = rows_of(split.iter_batches(100, shuffle=True, seed=1, epoch=0, skip_batches=7))
    np.testing.assert_array_equal(resumed["dense"], again["dense"][700:])


def test_shards_are_disjoint_equal_and_cover_the_split(plan):
    whole = rows_of(StreamedSplit(plan, "train").chunks())["dense"][:, 0]
    parts = [rows_of(StreamedSplit(plan, "train").shard(rank, 3).chunks())["dense"][:, 0] for rank in range(3)]
    assert len({len(p) for p in parts}) == 1 and len(parts[0]) == len(whole) // 3
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.sort(whole[:3 * (len(whole) // 3)]))
    np.testing.assert_array_equal(parts[1], whole[1:3 * (len(whole) // 3):3])


def test_head_frequencies_and_batches_work_on_streams(plan):
    split = StreamedSplit(plan, "valid")
    assert len(split.head(10)) == 10 and len(split.head(10**6)) == len(split)
    table = load_tables(plan)["valid"]
    for name, counts in count_frequencies(split).items():
        np.testing.assert_array_equal(counts, count_frequencies(table)[name])
    assert sum(len(b["label"]) for b in CTRBatches(split, 64, shuffle=True, seed=3)) == len(split)


def test_a_reader_error_reaches_the_consumer(plan, monkeypatch):
    def broken():
        yield {"label": np.zeros(3)}
        raise DataError("disk gone")
    with pytest.raises(DataError, match="disk gone"):
        list(stream.prefetched(broken()))


def test_large_files_stream_and_small_ones_load(tmp_path):
    path = tmp_path / "clicks.csv"
    pcsv.write_csv(make_raw_clicks(600, num_users=50), path)
    base = {"data": {"name": "csv", "files": {"path": str(path), "label": "click", "categorical": ["user"]}}}
    assert type(load_dataset(load_config(base=base)["data"]).train).__name__ == "CTRTable"
    base["data"]["files"]["in_memory_bytes"] = 100
    assert isinstance(load_dataset(load_config(base=base)["data"]).train, StreamedSplit)
