from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

from paddle_edo.data import DataError, vocabulary
from paddle_edo.data.vocabulary import ValueCounter, Vocabulary


def test_counts_merge_over_batches_like_a_counter(monkeypatch):
    monkeypatch.setattr(vocabulary, "REDUCE_EVERY", 5)  # merge often
    rng = np.random.default_rng(0)
    counter, expected = ValueCounter(), Counter()
    for _ in range(20):
        values = [f"v{int(x)}" for x in rng.zipf(1.5, 50) % 40]
        counter.add(pa.array(values + [None]))
        expected.update(values)
    counts = counter.counts()
    assert dict(zip(counts["value"].to_pylist(), counts["count"].to_pylist())) == dict(expected)


def test_ids_by_descending_count_with_rare_and_unseen_values_unknown():
    counted = pa.table({"value": ["b", "a", "c", "d"], "count": [5, 5, 9, 1]})
    vocab = Vocabulary.build("city", counted, min_count=2)
    assert vocab.values.to_pylist() == ["c", "a", "b"] and vocab.size == 4
    np.testing.assert_array_equal(vocab.ids(pa.array(["a", "c", "d", None, "zz", " b "])), [2, 1, 0, 0, 0, 3])
    capped = Vocabulary.build("city", counted, max_size=3)
    assert capped.values.to_pylist() == ["c", "a"]
    np.testing.assert_array_equal(capped.ids(pa.array([7, 9])), [0, 0])  # numbers look up by their text
    assert Vocabulary.build("city", counted.slice(0, 0)).ids(pa.array(["a"])).tolist() == [0]


def test_saved_vocabularies_round_trip_and_refuse_other_columns_and_changed_bytes(tmp_path):
    vocab = Vocabulary.build("city", pa.table({"value": ["北京", "上海"], "count": [3, 2]}))
    digest = vocab.save(tmp_path / "v.parquet")
    back = Vocabulary.load(tmp_path / "v.parquet", "city", digest)
    assert back.values.to_pylist() == ["北京", "上海"] and back.counts.tolist() == [3, 2]
    assert not (tmp_path / "v.parquet.tmp").exists()
    with pytest.raises(DataError, match="is for column 'city', not 'user'"):
        Vocabulary.load(tmp_path / "v.parquet", "user")
    Vocabulary.build("city", pa.table({"value": ["x"], "count": [1]})).save(tmp_path / "v.parquet")
    with pytest.raises(DataError, match="v.parquet does not match the run's data plan"):
        Vocabulary.load(tmp_path / "v.parquet", "city", digest)
    with pytest.raises(DataError, match="vocabulary file .*none.parquet is missing"):
        Vocabulary.load(tmp_path / "none.parquet", "city")
