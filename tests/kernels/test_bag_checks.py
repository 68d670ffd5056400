"""The bag kernels' own checks of their inputs (kernels/bags.cc), made before any row is read, on batches
small enough for one thread and large enough for the parallel scan: the first bad bag or entry is named."""
import numpy as np
import paddle
import pytest

from paddle_edo.kernels import fused_ops

pytestmark = pytest.mark.skipif(fused_ops() is None, reason="needs the native kernels")


def pool(rows: int, ids: np.ndarray, offsets: np.ndarray):
    table = paddle.zeros([rows, 8], dtype="float32")
    flat = paddle.to_tensor(ids.astype(np.int64))
    return fused_ops().edo_bag_pool(table, flat, flat, paddle.to_tensor(offsets.astype(np.int64)),
                                    paddle.zeros([0], dtype="float32"), 0, False, 0)


@pytest.mark.parametrize("bags", [10, 100_000])  # one thread; both threads scan
def test_the_first_decreasing_offset_is_named(bags):
    offsets = np.arange(bags + 1)
    offsets[bags // 2], offsets[bags - 2] = offsets[bags // 2] + 2, offsets[bags - 2] + 2  # two bags go back
    with pytest.raises(OSError, match=rf"offsets must not decrease \(bag {bags // 2}\)"):
        pool(50, np.zeros(bags, np.int64), offsets)


@pytest.mark.parametrize("bags", [10, 100_000])
def test_the_first_id_outside_the_table_is_named(bags):
    ids = np.zeros(bags, np.int64)
    ids[bags // 3], ids[bags - 1] = 50, -1
    with pytest.raises(OSError, match=rf"entry {bags // 3}: row 50 is outside \[0, 50\)"):
        pool(50, ids, np.arange(bags + 1))


def test_good_bags_pass_both_scans():
    ids = np.arange(100_000) % 50
    out, _ = pool(50, ids, np.arange(100_001))
    assert out.shape == [100_000, 8]
