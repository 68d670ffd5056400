"""Every registered table has the shape of paddle.nn.Embedding: (num_embeddings, embedding_dim, <its own
essentials>, *, padding_idx=None, sparse=True, weight_attr=None, name=None, ...), the same names as its
config keys, and the same defaults; old call shapes still work for one release, with a warning."""
import inspect

import numpy as np
import paddle
import pytest

from paddle_edo.errors import EdoDeprecationWarning
from paddle_edo.nn import (EMBEDDINGS, CachedEmbedding, CharWordEmbedding, ClusteredEmbedding, DenseEmbedding,
                           HashEmbedding, MixedDimEmbedding, MultiTaskEmbedding, PSEmbedding, QREmbedding,
                           QuantizedEmbedding)

ROWS, DIM = 40, 4
FREQUENCIES = np.arange(ROWS, 0, -1).astype(float)
# what each layer needs beyond (num_embeddings, embedding_dim): a new layer must be listed here
ESSENTIALS = {
    "dense": {}, "quantized": {}, "qr": {}, "cached": {}, "bag": {}, "ps_sparse": {},
    "hash": {"num_buckets": 16},
    "mixed_dim": {"frequencies": FREQUENCIES},
    "clustered": {"frequencies": FREQUENCIES},
    "multitask": {"tasks": ["click", "rating"]},
    "char_word": {"num_chars": 12},
}
COMMON = [("padding_idx", None), ("sparse", True), ("weight_attr", None), ("name", None)]
VOCABULARY_PADDING = {"char_word": 0}  # its vocabularies pad with id 0, the only padding it takes
# config keys that are fractions of num_embeddings, which a config resolves into the layer's counts
CONFIG_ONLY = {"bucket_fraction", "cluster_fraction", "keep_fraction", "min_cache_rows"}
STATIC_ONLY = {"ps_sparse"}  # built in dynamic graph, looked up in static programs only


def parameters(cls):
    return list(inspect.signature(cls.__init__).parameters.values())[1:]


def test_every_registered_layer_is_listed_here():
    assert set(ESSENTIALS) == set(EMBEDDINGS)


@pytest.mark.parametrize("name", sorted(EMBEDDINGS))
def test_the_signature_has_the_shape_of_paddle_nn_embedding(name):
    params = parameters(EMBEDDINGS[name])
    assert [(p.name, p.kind, p.default) for p in params[:2]] == [
        ("num_embeddings", inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.empty),
        ("embedding_dim", inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.empty)]
    keyword = [p for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]
    positional = [p for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    assert params == positional + keyword, "keyword-only after the essentials, no *args / **kwargs"
    common = [p for p in keyword if p.name in dict(COMMON)]
    assert [p.name for p in common] == [n for n, _ in COMMON], "padding_idx, sparse, weight_attr, name, in order"
    assert keyword.index(common[0]) <= 1 and [keyword.index(p) for p in common] == list(
        range(keyword.index(common[0]), keyword.index(common[0]) + 4)), "the common keywords come first, together"
    defaults = {p.name: p.default for p in common}
    assert defaults == {**dict(COMMON), **({"padding_idx": VOCABULARY_PADDING[name]} if name in VOCABULARY_PADDING
                                           else {})}
    assert not {"dtype", "check_ids", "word_vocab_size", "char_vocab_size"} & {p.name for p in params}


@pytest.mark.parametrize("name", sorted(EMBEDDINGS))
def test_config_keys_are_constructor_arguments_with_the_same_defaults(name):
    cls = EMBEDDINGS[name]
    params = {p.name: p for p in parameters(cls)}
    for key, option in cls.config_options.items():
        if key in CONFIG_ONLY:
            continue
        assert key in params, f"{name}: config key {key!r} is not an argument of {cls.__name__}"
        default = params[key].default
        if default is not inspect.Parameter.empty and key != "frequencies":  # configs name the source of counts
            assert default == option.default, f"{name}.{key}: {default!r} in Python, {option.default!r} in configs"


def build(kind, **extra):
    return EMBEDDINGS[kind](ROWS, DIM, **ESSENTIALS[kind], **extra)


@pytest.mark.parametrize("name", sorted(set(EMBEDDINGS) - STATIC_ONLY))
def test_weight_attr_and_name_reach_the_tables(name):
    attr = paddle.ParamAttr(initializer=paddle.nn.initializer.Constant(0.5))
    layer = build(name, weight_attr=attr, name="my_table")
    assert layer.full_name().startswith("my_table")
    tables = [layer] + [sub for sub in layer.sublayers() if isinstance(sub, DenseEmbedding)]
    rows = []
    for table in tables:
        if isinstance(table, CachedEmbedding):
            rows.append(table.host.column("weight")[1:])
        elif isinstance(table, (DenseEmbedding, QuantizedEmbedding)):
            padding = table.padding_idx
            rows.append(np.delete(table.weight.numpy(), [padding] if padding is not None else [], axis=0))
    assert rows and all(np.all(r == 0.5) for r in rows)


def test_packed_and_row_updated_tables_take_the_initializer_too():
    attr = paddle.ParamAttr(initializer=paddle.nn.initializer.Constant(0.25))
    table = QuantizedEmbedding(ROWS, DIM, "fp16", "low_precision", weight_attr=attr, padding_idx=0)
    with paddle.no_grad():
        np.testing.assert_array_equal(table(paddle.arange(ROWS)).numpy()[1:], 0.25)
        np.testing.assert_array_equal(table(paddle.to_tensor([0])).numpy(), 0.0)


def test_a_named_weight_attr_gives_each_inner_table_its_own_name():
    attr = paddle.ParamAttr(name="items")
    layer = QREmbedding(1000, 4, weight_attr=attr)
    assert {layer.quotient.weight.name, layer.remainder.weight.name} == {"items.quotient", "items.remainder"}


def test_one_default_whether_built_in_python_or_from_a_config():
    assert QREmbedding(1000, 4).num_collisions == QREmbedding.from_config(
        1000, {"dim": 4, "sparse": True, "num_collisions": None, "operation": "mult"}).num_collisions == 32
    clustered = ClusteredEmbedding(1000, 4, frequencies=np.ones(1000))
    configured = ClusteredEmbedding.from_config(1000, {"dim": 4, "sparse": True, "cluster_fraction": 0.05,
                                                       "keep_fraction": 0.01}, frequencies=np.ones(1000))
    assert (clustered.num_clusters, clustered.keep_top) == (configured.num_clusters, configured.keep_top) == (50, 10)


def test_num_embeddings_is_the_number_of_ids_everywhere():
    hashed = HashEmbedding(1_000_000, 8, 5000)
    assert (hashed.num_embeddings, hashed.num_buckets, hashed.table.num_embeddings) == (1_000_000, 5000, 5000)
    assert MultiTaskEmbedding(300, 8, ["a"]).num_embeddings == 300
    assert CharWordEmbedding(300, 8, num_chars=50).num_embeddings == 300


OLD_CALLS = {
    "DenseEmbedding(10, 4, 0, True, False)":
        (lambda: DenseEmbedding(10, 4, 0, True, False), lambda t: (t.padding_idx, t.range_check) == (0, False)),
    "QuantizedEmbedding(10, 4, 'int4', 0, True, 'qat')":
        (lambda: QuantizedEmbedding(10, 4, "int4", 0, True, "qat"),
         lambda t: (t.format.name, t.padding_idx, t.mode) == ("int4", 0, "qat")),
    "QuantizedEmbedding(10, 4, dtype='int2')":
        (lambda: QuantizedEmbedding(10, 4, dtype="int2"), lambda t: t.format.name == "int2"),
    "HashEmbedding(100, 8, 3, 'mean')":
        (lambda: HashEmbedding(100, 8, 3, "mean"),
         lambda t: (t.num_embeddings, t.num_buckets, t.num_hashes, t.combine) == (100, 100, 3, "mean")),
    "HashEmbedding(100, 8, num_hashes=3)":
        (lambda: HashEmbedding(100, 8, num_hashes=3), lambda t: (t.num_buckets, t.num_hashes) == (100, 3)),
    "QREmbedding(100, 8, 10, 'add', 0)":
        (lambda: QREmbedding(100, 8, 10, "add", 0), lambda t: (t.num_collisions, t.padding_idx) == (10, 0)),
    "MixedDimEmbedding(40, 8, f, 2, 0.5, 2, 0)":
        (lambda: MixedDimEmbedding(40, 8, FREQUENCIES, 2, 0.5, 2, 0), lambda t: t.padding_idx == 0),
    "ClusteredEmbedding(4, 2, mapping, rows)":
        (lambda: ClusteredEmbedding(4, 2, np.array([0, 0, 1, 1]), np.ones((2, 2), np.float32)), lambda t: t.packed),
    "CachedEmbedding(40, 4, 10, 0.2, 'lfu')":
        (lambda: CachedEmbedding(40, 4, 10, 0.2, "lfu"), lambda t: (t.cache_rows, t.slots.policy.name) == (10, "lfu")),
    "CharWordEmbedding(300, 50, 8, 'add')":
        (lambda: CharWordEmbedding(300, 50, 8, "add"),
         lambda t: (t.num_embeddings, t.num_chars, t.embedding_dim, t.fusion) == (300, 50, 8, "add")),
    "MultiTaskEmbedding(table, ['a', 'b'])":
        (lambda: MultiTaskEmbedding(DenseEmbedding(30, 4), ["a", "b"]), lambda t: t.num_embeddings == 30),
    "PSEmbedding(10, 4, 0, True, 'count_filter')":
        (lambda: PSEmbedding(10, 4, 0, True, "count_filter"), lambda t: (t.padding_idx, t.entry) == (0, "count_filter")),
}


@pytest.mark.parametrize("call", sorted(OLD_CALLS))
def test_old_call_shapes_still_work_with_a_warning(call):
    make, check = OLD_CALLS[call]
    with pytest.warns(EdoDeprecationWarning, match="goes in the next release; call"):
        layer = make()
    assert check(layer)


def test_an_argument_given_twice_is_refused():
    with pytest.raises(TypeError, match="both by position and by keyword"):
        DenseEmbedding(10, 4, 0, padding_idx=1)
    with pytest.raises(TypeError, match="both 'dtype' \\(its old name\\) and 'storage_format'"):
        QuantizedEmbedding(10, 4, dtype="int8", storage_format="int4")


def test_a_weight_attr_for_char_word_tables_of_another_type_is_refused():
    with pytest.raises(ValueError, match="weight_attr initialises dense word and character tables; a 'hash' table"):
        CharWordEmbedding(40, 4, num_chars=10, table={"type": "hash"}, weight_attr=paddle.ParamAttr())


def test_char_word_takes_word_ids_alone_when_it_knows_their_characters():
    word_chars = np.array([[0, 0], [1, 0], [2, 3], [4, 5]])
    layer = CharWordEmbedding(4, 6, "mean", num_chars=6, word_chars=word_chars)
    words = paddle.to_tensor([[2, 3, 0]])
    np.testing.assert_array_equal(layer(words).numpy(), layer(words, paddle.to_tensor(word_chars[[2, 3, 0]][None])).numpy())
    with pytest.raises(TypeError, match="give char_ids"):
        CharWordEmbedding(4, 6, num_chars=6)(words)
