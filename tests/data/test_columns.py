import numpy as np
import pyarrow as pa
import pytest

from paddle_edo.data.columns import LabelRule, categorical_columns, numeric_columns, to_numbers
from paddle_edo.schema import ConfigError

SECTION = {"categorical": {}, "numeric": {}, "ids": "vocabulary", "min_count": 1, "max_size": None,
           "max_values": 16, "numeric_transform": "log1p", "num_buckets": 16}


def test_label_rules_parse_and_apply():
    assert LabelRule.parse("click") == LabelRule("click")
    assert LabelRule.parse("rating >= 4") == LabelRule("rating", ">=", 4.0)
    assert LabelRule.parse("income == '>50K'") == LabelRule("income", "==", ">50K")
    labels, bad = LabelRule.parse("rating >= 4").apply(pa.array(["5", "3", None, "4.0"]))
    np.testing.assert_array_equal(labels, [1, 0, 0, 1])
    np.testing.assert_array_equal(bad, [False, False, True, False])
    labels, bad = LabelRule.parse("income == '>50K'").apply(pa.array([" >50K", "<=50K"]))
    np.testing.assert_array_equal(labels, [1, 0])
    assert not bad.any()
    labels, bad = LabelRule("click").apply(pa.array(["1", "0", "2", "x", None]))
    np.testing.assert_array_equal(labels[:2], [1, 0])
    np.testing.assert_array_equal(bad, [False, False, True, True, True])


@pytest.mark.parametrize("text", ["", "a == ", "rating >= high", "== 3"])
def test_bad_label_rules_are_refused(text):
    with pytest.raises(ConfigError, match="data.files.label"):
        LabelRule.parse(text)


def test_numbers_missing_and_bad_cells():
    numbers, bad = to_numbers(pa.array(["1.5", None, " 2 ", "1e3", "abc", "-4"]))
    np.testing.assert_array_equal(bad, [False, False, False, False, True, False])
    np.testing.assert_array_equal(numbers[[0, 2, 3, 5]], [1.5, 2.0, 1000.0, -4.0])
    assert np.isnan(numbers[1])
    numbers, bad = to_numbers(pa.array([3, None], pa.int64()))
    assert numbers[0] == 3 and np.isnan(numbers[1]) and not bad.any()


def test_columns_take_the_section_defaults_and_their_own_settings():
    section = {**SECTION, "categorical": {"user": {"min_count": 3}, "tags": {"separator": "|"}}, "numeric": ["price"]}
    user, tags = categorical_columns(section)
    assert (user.min_count, user.ids, user.multi_valued) == (3, "vocabulary", False)
    assert (tags.min_count, tags.separator, tags.max_values, tags.multi_valued) == (1, "|", 16, True)
    (price,) = numeric_columns(section)
    assert (price.transform, price.num_buckets, price.bucketized) == ("log1p", 16, False)


@pytest.mark.parametrize("categorical,message", [
    ({"a": {"ids": "given"}}, "data.files.categorical.a.num_embeddings = null"),
    ({"a": {"ids": "words"}}, "data.files.categorical.a.ids = 'words'"),
    ({"a": 3}, "data.files.categorical.a = 3 must be a mapping"),
    ("a", "data.files.categorical = 'a' must be a list of column names"),
])
def test_bad_column_settings_name_the_key(categorical, message):
    with pytest.raises(ConfigError, match=message):
        categorical_columns({**SECTION, "categorical": categorical})
