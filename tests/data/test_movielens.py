import numpy as np

from paddle_edo.data import count_frequencies, default_cache_dir, split_table


def raw_ratings():
    lines = (default_cache_dir() / "movielens" / "ml-100k.inter").read_text().splitlines()[1:]
    return [line.split("\t") for line in lines]


def test_fields_and_labels_match_the_raw_file(movielens):
    raw = raw_ratings()
    assert len(movielens) == len(raw) == 100_000
    sizes = {f.name: f.vocab_size for f in movielens.fields}
    assert sizes["user_id"] == 943 + 1 and sizes["item_id"] == 1682 + 1 and sizes["gender"] == 3
    expected = np.array([float(r[2]) >= 4 for r in raw], dtype=np.float32)
    np.testing.assert_array_equal(movielens.labels, expected)
    # the same raw user always maps to the same id, and ids start at 1
    users = movielens.ids["user_id"]
    assert users.min() == 1
    mapping = {}
    for raw_row, uid in zip(raw[:5000], users[:5000]):
        assert mapping.setdefault(raw_row[0], uid) == uid


def test_genres_are_multi_valued_and_padded_with_zero(movielens):
    genres = movielens.ids["genres"]
    spec = [f for f in movielens.fields if f.name == "genres"][0]
    assert spec.multi_valued and genres.shape == (100_000, spec.max_len)
    assert (genres[:, 0] > 0).all()
    nonzero = genres != 0
    assert not (nonzero[:, 1:] & ~nonzero[:, :-1]).any()  # padding only at the end


def test_split_is_seeded_disjoint_and_80_10_10(movielens):
    a = split_table(movielens, [0.8, 0.1, 0.1], seed=1)
    b = split_table(movielens, [0.8, 0.1, 0.1], seed=1)
    c = split_table(movielens, [0.8, 0.1, 0.1], seed=2)
    assert (len(a.train), len(a.valid), len(a.test)) == (80_000, 10_000, 10_000)
    np.testing.assert_array_equal(a.test.ids["user_id"], b.test.ids["user_id"])
    assert not np.array_equal(a.test.ids["item_id"], c.test.ids["item_id"])
    key = lambda t: set(zip(t.ids["user_id"].tolist(), t.ids["item_id"].tolist()))
    assert not key(a.train) & key(a.test)


def test_frequencies_count_ids(movielens):
    counts = count_frequencies(movielens)
    assert counts["user_id"].sum() == 100_000 and counts["user_id"][0] == 0
    assert counts["genres"][0] == 0 and counts["genres"].sum() == (movielens.ids["genres"] != 0).sum()


def test_every_field_keeps_its_raw_values_in_id_order(movielens):
    raw = raw_ratings()
    values = movielens.values
    assert set(values) == {f.name for f in movielens.fields}
    assert all(len(values[f.name]) == f.vocab_size and values[f.name][0] is None for f in movielens.fields)
    for raw_row, uid, iid in zip(raw[:2000], movielens.ids["user_id"][:2000], movielens.ids["item_id"][:2000]):
        assert values["user_id"][uid] == raw_row[0]
    items = {line.split("\t")[0]: line.split("\t") for line in
             (default_cache_dir() / "movielens" / "ml-100k.item").read_text().splitlines()[1:]}
    first_item = items[raw[0][1]]
    assert values["item_id"][movielens.ids["item_id"][0]] == f"{first_item[1]} ({first_item[2]})"
    assert "Toy Story (1995)" in values["item_id"] and "Comedy" in values["genres"]
    assert split_table(movielens, [0.8, 0.1, 0.1], seed=1).values is values  # the splits carry them
