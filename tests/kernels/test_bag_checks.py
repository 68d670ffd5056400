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


@pytest.mark.parametrize("packed", [False, True])
def test_padded_ids_give_their_bags_shape_the_same_values(packed):
    """Ids [2, 3, L] pool into [2, 3, D] in the kernel itself, the values of the same ids passed flat."""
    rng = np.random.default_rng(0)
    table = paddle.to_tensor(rng.normal(size=(50, 8)).astype(np.float32))
    ids = rng.integers(0, 50, (2, 3, 4)).astype(np.int64)
    bounds = paddle.to_tensor(np.arange(0, ids.size + 1, 4, dtype=np.int64))
    no_weights = paddle.zeros([0], dtype="float32")

    def bags(given):
        given = paddle.to_tensor(given)
        if packed:
            return fused_ops().edo_packed_bag_pool(given, table.astype("float16"), table, bounds, no_weights, 0, 8, 0,
                                                   False, 0)
        return fused_ops().edo_bag_pool(table, given, given, bounds, no_weights, 0, False, 0)[0]

    shaped, flat = bags(ids), bags(ids.reshape(-1))
    assert shaped.shape == [2, 3, 8] and flat.shape == [6, 8]
    np.testing.assert_array_equal(shaped.numpy().reshape(6, 8), flat.numpy())


def test_padded_ids_whose_rows_are_not_the_bags_are_refused():
    ids = paddle.to_tensor(np.zeros((3, 4), np.int64))
    with pytest.raises(OSError, match=r"padded ids \[\.\.\., L\] must make one bag of L a row"):
        fused_ops().edo_bag_pool(paddle.zeros([5, 8]), ids, ids, paddle.to_tensor(np.array([0, 6, 12], np.int64)),
                                 paddle.zeros([0], dtype="float32"), 0, False, 0)
