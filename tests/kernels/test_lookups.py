"""The fp32 gather kernel (kernels/lookups.cc) against Paddle's gather: the same rows, the padding id's zeros."""
import numpy as np
import paddle
import paddle.nn.functional as F
import pytest

import paddle_edo.kernels as kernels


@pytest.mark.parametrize("dim", [64, 12, 6, 1])  # whole 4-lane rows (streamed where the output is large), tails
@pytest.mark.parametrize("padding_idx", [None, 0])
@pytest.mark.parametrize("count", [300, 9000])  # one thread, and threads
def test_the_gather_kernel_gives_paddles_rows(dim, padding_idx, count):
    assert kernels.fused_ops() is not None  # built by `make test`
    rng = np.random.default_rng(dim)
    table = paddle.to_tensor(rng.standard_normal((5000, dim)).astype(np.float32))
    ids = rng.integers(0, 5000, (count // 3, 3)).astype(np.int64)
    ids[0, 0] = 0
    out = kernels.fused_ops().edo_dense_lookup(paddle.to_tensor(ids), table, padding_idx is not None,
                                               -1 if padding_idx is None else padding_idx)
    expected = F.embedding(paddle.to_tensor(ids), table, padding_idx=padding_idx).numpy()
    assert out.shape == [count // 3, 3, dim]
    np.testing.assert_array_equal(out.numpy(), expected)
    if padding_idx is not None:
        assert not out.numpy()[0, 0].any()


def test_the_gather_kernel_refuses_an_id_outside_the_table():
    table = paddle.zeros([10, 8])
    with pytest.raises(Exception, match=r"id 10 is outside \[0, 10\)"):
        kernels.fused_ops().edo_dense_lookup(paddle.to_tensor([[1, 10]]), table, False, -1)
