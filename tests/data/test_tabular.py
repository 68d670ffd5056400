import json

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest

from paddle_edo.config import load_config
from paddle_edo.data import DataError, DataPlan, TabularSource, load_dataset
from paddle_edo.data.stream import load_tables
from paddle_edo.data.synthetic import make_raw_clicks
from paddle_edo.data.tabular import build_plan, prepare_plan

COLUMNS = {"categorical": {"user": {"min_count": 2}, "city": None, "device": None,
                           "tags": {"separator": "|", "max_values": 2}},
           "numeric": {"price": None, "age": {"transform": "standardize"},
                       "hour": {"transform": "bucketize", "num_buckets": 4}}}


def data_config(path, **files):
    return load_config(base={"data": {"name": "csv", "files": {"path": str(path), "label": "click", **COLUMNS,
                                                               **files}}})["data"]


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    folder = tmp_path_factory.mktemp("raw")
    table = make_raw_clicks(3000, num_users=300)
    pcsv.write_csv(table, folder / "clicks.csv")
    pq.write_table(table, folder / "clicks.parquet", row_group_size=700)
    return folder, table


def test_the_plan_maps_raw_values_as_the_training_split_says(raw):
    folder, table = raw
    plan = build_plan(TabularSource.from_config(data_config(folder / "clicks.csv")))
    assert sum(plan.rows.values()) == 3000 and 2200 < plan.rows["train"] < 2600
    by_name = {f.name: f for f in plan.fields}
    assert [f.name for f in plan.fields] == ["user", "city", "device", "tags", "hour"]
    assert by_name["city"].vocab_size == 11 and by_name["device"].vocab_size == 4   # 10 cities, 3 devices + unknown
    assert by_name["tags"].max_len == 2 and by_name["hour"].vocab_size == 5         # 3 boundaries: 4 buckets + missing
    assert plan.dense_features == ["price", "age"]
    users = plan.vocabularies["user"]
    assert users.counts.min() >= 2 and list(users.counts) == sorted(users.counts, reverse=True)
    tables = load_tables(plan)
    train = tables["train"]
    assert len(train) == plan.rows["train"] and train.dense.shape == (len(train), 2)
    np.testing.assert_allclose(train.dense[:, 1].mean(), 0.0, atol=0.05)   # standardized on the training split
    assert set(np.unique(train.labels)) == {0.0, 1.0}
    assert train.ids["tags"].shape == (len(train), 2) and train.ids["city"].min() == 0   # empty cells -> 0


def test_csv_and_parquet_of_the_same_rows_give_the_same_inputs_and_splits(raw):
    folder, _ = raw
    config = data_config(folder / "clicks.csv")
    from_csv = load_tables(build_plan(TabularSource.from_config(config)))
    from_parquet = load_tables(build_plan(TabularSource.from_config({**config, "name": "parquet", "files": {
        **config["files"], "path": str(folder / "clicks.parquet")}})))
    # a row's split follows from (file name before its suffixes, row): the rows agree
    for split in ("train", "test"):
        a, b = from_csv[split], from_parquet[split]
        np.testing.assert_array_equal(a.labels, b.labels)
        np.testing.assert_allclose(a.dense, b.dense, rtol=1e-6)
        for name in ("user", "tags", "hour"):
            np.testing.assert_array_equal(a.ids[name], b.ids[name])


def test_splits_do_not_depend_on_the_block_size(raw):
    folder, _ = raw
    big = load_tables(build_plan(TabularSource.from_config(data_config(folder / "clicks.csv"))))
    small = load_tables(build_plan(TabularSource.from_config(data_config(folder / "clicks.csv", block_size=4096))))
    for split in ("train", "valid", "test"):
        np.testing.assert_array_equal(big[split].ids["user"], small[split].ids["user"])


def test_the_plan_is_saved_reused_and_refused_for_other_settings(raw, tmp_path):
    folder, _ = raw
    state = tmp_path / "data"
    first = prepare_plan(TabularSource.from_config(data_config(folder / "clicks.csv")), state)
    saved = json.loads((state / "plan.json").read_text())
    assert saved["rows"] == first.rows and (state / "vocabulary.user.parquet").is_file()
    again = DataPlan.load(TabularSource.from_config(data_config(folder / "clicks.csv")), state)
    assert again.rows == first.rows and again.fields == first.fields
    assert again.vocabularies["user"].values.equals(first.vocabularies["user"].values)
    with pytest.raises(DataError, match="prepared with data.files.min_count = 1, not 3"):
        DataPlan.load(TabularSource.from_config(data_config(folder / "clicks.csv", min_count=3)), state)


def test_changed_files_keep_the_vocabularies_and_recount_rows(tmp_path):
    path = tmp_path / "clicks.csv"
    pcsv.write_csv(make_raw_clicks(1000, num_users=50), path)
    state = tmp_path / "data"
    first = prepare_plan(TabularSource.from_config(data_config(path)), state)
    pcsv.write_csv(make_raw_clicks(400, num_users=50, seed=5), path)
    again = prepare_plan(TabularSource.from_config(data_config(path)), state)
    assert sum(again.rows.values()) == 400 and again.vocabularies["user"].size == first.vocabularies["user"].size


@pytest.mark.parametrize("row,message", [
    ("1,u1,北京,ios,体育,abc,30,5", r"line 3, column 'price': 'abc' is not a number"),
    ("2,u1,北京,ios,体育,1.0,30,5", r"line 3, column 'click': '2' is not a label of column 'click' \(0 or 1\)"),
    (",u1,北京,ios,体育,1.0,30,5", r"line 3, column 'click': None is not a label"),
])
def test_bad_cells_name_file_line_column_and_value(tmp_path, row, message):
    path = tmp_path / "bad.csv"
    path.write_text("click,user,city,device,tags,price,age,hour\n1,u1,北京,ios,体育,1.0,30,5\n" + row + "\n",
                    encoding="utf-8")
    with pytest.raises(DataError, match=message) as info:
        build_plan(TabularSource.from_config(data_config(path)))
    assert str(path) in str(info.value)


def test_bad_rows_can_be_skipped_and_counted(tmp_path, caplog):
    path = tmp_path / "bad.csv"
    good = "1,u1,北京,ios,体育,1.0,30,5\n0,u2,上海,web,,2.0,,7\n"
    path.write_text("click,user,city,device,tags,price,age,hour\n" + good * 20 + "1,u1,北京,ios,体育,x,30,5\n"
                    "1,u1\n", encoding="utf-8")
    plan = build_plan(TabularSource.from_config(data_config(path, bad_rows="skip")))
    assert sum(plan.rows.values()) == 40
    assert "2 bad rows skipped" in caplog.text


def test_given_ids_keep_their_values_and_refuse_out_of_range(tmp_path):
    path = tmp_path / "ids.csv"
    path.write_text("label,user,tags\n" + "1,3,1|2|5\n0,4,7\n" * 10)
    base = {"data": {"name": "csv", "split": [0.5, 0.25, 0.25], "files": {
        "path": str(path), "categorical": {"user": {"ids": "given", "num_embeddings": 10},
                                           "tags": {"ids": "given", "num_embeddings": 8, "separator": "|"}}}}}
    tables = load_tables(build_plan(TabularSource.from_config(load_config(base=base)["data"])))
    all_rows = np.concatenate([tables[s].ids["tags"] for s in ("train", "valid", "test")])
    assert {tuple(r) for r in all_rows} == {(1, 2, 5), (7, 0, 0)}
    path.write_text("label,user,tags\n1,3,1|2|5\n0,12,7\n")
    with pytest.raises(DataError, match=r"line 3, column 'user': '12' is not an integer id in \[0, 10\)"):
        build_plan(TabularSource.from_config(load_config(base=base)["data"]))


def test_split_by_file_gives_the_last_files_to_valid_and_test(tmp_path):
    for day in range(5):
        pcsv.write_csv(make_raw_clicks(100, num_users=20, seed=day), tmp_path / f"day_{day}.csv")
    config = data_config(tmp_path, split_by="file")
    config["split"] = [0.6, 0.2, 0.2]
    splits = load_dataset(config)
    assert (len(splits.train), len(splits.valid), len(splits.test)) == (300, 100, 100)
    config["files"]["path"] = str(tmp_path / "day_[01].csv")
    with pytest.raises(DataError, match="2 files leave none for training"):
        TabularSource.from_config(config)


def test_a_multi_valued_column_with_one_value_a_cell_is_a_single_valued_field(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("label,tags\n" + "1,a\n0,b\n" * 20 + "1,a|b\n")
    config = {"name": "csv", "split": [0.5, 0.25, 0.25], "files": {"path": str(path),
                                                                  "categorical": {"tags": {"separator": "|"}}}}
    for seed, max_len in ((1, 2), (2, 1)):  # the a|b row (row 40) is in training with seed 1, in test with seed 2
        source = TabularSource.from_config(load_config(base={"data": {**config, "seed": seed}})["data"])
        assert source.split_codes(0, 40, 1)[0] == (0 if max_len == 2 else 2)
        plan = build_plan(source)
        assert [f.max_len for f in plan.fields] == [max_len]
    test = load_tables(plan)["test"]
    assert test.ids["tags"].ndim == 1  # a cell of two values outside training keeps its first
    assert test.ids["tags"][-1] == plan.vocabularies["tags"].ids(pa.array(["a"]))[0] != 0
