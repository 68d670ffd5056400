import numpy as np
import paddle
import pytest

from paddle_edo.nn import EMBEDDINGS, DenseEmbedding, build_embedding, register_embedding
from paddle_edo.schema import ConfigError


def test_lookup_returns_the_rows_and_padding_is_zero():
    layer = DenseEmbedding(10, 4, padding_idx=0)
    ids = paddle.to_tensor([[1, 0], [9, 3]])
    out = layer(ids).numpy()
    weight = layer.weight.numpy()
    assert out.shape == (2, 2, 4)
    np.testing.assert_array_equal(out[0, 0], weight[1])
    np.testing.assert_array_equal(out[1, 0], weight[9])
    np.testing.assert_array_equal(out[0, 1], np.zeros(4, np.float32))
    np.testing.assert_array_equal(weight[0], np.zeros(4, np.float32))


def test_gradient_is_sparse_by_default_and_only_touches_looked_up_rows():
    layer = DenseEmbedding(10, 4, padding_idx=0)
    layer(paddle.to_tensor([1, 2, 2, 0])).sum().backward()
    grad = layer.weight._grad_ivar()
    assert grad.is_selected_rows()
    dense = DenseEmbedding(10, 4, sparse=False)
    dense(paddle.to_tensor([1])).sum().backward()
    assert not dense.weight._grad_ivar().is_selected_rows()


def test_bad_ids_are_refused_with_the_layer_and_the_value():
    layer = DenseEmbedding(10, 4)
    with pytest.raises(TypeError, match=r"ids must be int32 or int64, got float32"):
        layer(paddle.to_tensor([1.0]))
    with pytest.raises(IndexError, match=r"id 10 is out of range \[0, 10\)"):
        layer(paddle.to_tensor([3, 10]))
    with pytest.raises(IndexError, match=r"id -1 is out of range"):
        layer(paddle.to_tensor([-1]))
    assert "dense_embedding" in layer.full_name()


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="num_embeddings = 0"):
        DenseEmbedding(0, 4)
    with pytest.raises(ValueError, match="embedding_dim = 2.5"):
        DenseEmbedding(3, 2.5)
    with pytest.raises(ValueError, match="padding_idx = 5"):
        DenseEmbedding(3, 2, padding_idx=5)
    assert DenseEmbedding(3, 2, padding_idx=-1).padding_idx == 2


def test_to_static_matches_dygraph():
    layer = DenseEmbedding(50, 8, padding_idx=0)
    ids = paddle.to_tensor(np.random.default_rng(0).integers(0, 50, (16, 3)))
    expected = layer(ids).numpy()
    static = paddle.jit.to_static(layer, input_spec=[paddle.static.InputSpec([None, 3], "int64")],
                                  full_graph=True)
    np.testing.assert_array_equal(static(ids).numpy(), expected)


def test_registry_builds_by_name_and_refuses_unknown_names():
    layer = build_embedding({"type": "dense", "dim": 4}, 7, padding_idx=0)
    assert isinstance(layer, DenseEmbedding) and layer.num_embeddings == 7 and layer.sparse
    assert EMBEDDINGS["dense"] is DenseEmbedding and DenseEmbedding.registry_name == "dense"
    with pytest.raises(ConfigError, match="'dense'"):
        build_embedding({"type": "nope", "dim": 4}, 7)
    with pytest.raises(ValueError, match="registered twice"):
        register_embedding("dense")(type("Other", (DenseEmbedding,), {}))


def test_tables_below_min_rows_stay_dense():
    from paddle_edo.nn import QREmbedding

    small = build_embedding({"type": "qr", "dim": 4, "min_rows": 100}, 50)
    large = build_embedding({"type": "qr", "dim": 4, "min_rows": 100}, 500)
    assert type(small) is DenseEmbedding and type(large) is QREmbedding
