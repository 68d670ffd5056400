import numpy as np
import paddle
import pytest

from paddle_edo.nn import DenseEmbedding, QuantizedEmbedding
from paddle_edo.nn import initialization
from paddle_edo.nn.initialization import STREAM_VALUES


def _table(seed: int, rows: int = 3 * STREAM_VALUES // 16 + 5, **kwargs) -> np.ndarray:
    paddle.seed(seed)
    return DenseEmbedding(rows, 16, **kwargs).weight.numpy()


def test_tables_draw_a_normal_of_their_std_reproducibly_from_paddles_seed():
    first, again, other = _table(7), _table(7), _table(8)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, other)
    values = first.ravel().astype(np.float64)
    assert abs(values.std() / 0.01 - 1) < 0.005            # 3.1M draws: the std's own spread is 0.04%
    assert abs(values.mean()) < 5 * 0.01 / np.sqrt(values.size)
    assert abs(np.mean(np.abs(values)) / 0.01 - np.sqrt(2 / np.pi)) < 0.005   # normal, not uniform


def test_the_values_do_not_depend_on_the_thread_count(monkeypatch):
    two = _table(3)
    monkeypatch.setattr(initialization, "cpu_threads", lambda: 1)
    np.testing.assert_array_equal(_table(3), two)


def test_padding_row_std_and_every_layer_on_the_path():
    weight = _table(1, rows=1000, padding_idx=4, init_std=0.5)
    np.testing.assert_array_equal(weight[4], np.zeros(16, np.float32))
    assert 0.45 < weight.std() < 0.55
    paddle.seed(1)
    qat = QuantizedEmbedding(1000, 16, "int4", mode="qat", padding_idx=4, init_std=0.5)
    np.testing.assert_array_equal(qat.weight.numpy(), weight)


def test_a_named_or_global_initializer_is_kept():
    constant = paddle.ParamAttr(initializer=paddle.nn.initializer.Constant(0.25))
    np.testing.assert_array_equal(DenseEmbedding(100, 4, weight_attr=constant).weight.numpy(), np.full((100, 4), 0.25))
    paddle.nn.initializer.set_global_initializer(paddle.nn.initializer.Constant(-1.0))
    try:
        np.testing.assert_array_equal(DenseEmbedding(100, 4).weight.numpy(), np.full((100, 4), -1.0))
    finally:
        paddle.nn.initializer.set_global_initializer(None)


@pytest.mark.parametrize("rows", [1, 17])
def test_small_tables(rows):
    weight = _table(2, rows=rows)
    assert weight.shape == (rows, 16) and np.isfinite(weight).all() and weight.std() > 0
