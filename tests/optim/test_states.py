"""TableStates: a rank's share of a table updates, and rounds its compressed states, exactly as the whole
table does on the same rows."""
import numpy as np
import paddle
import pytest

from paddle_edo.errors import EdoValueError
from paddle_edo.kernels import fused_ops
from paddle_edo.nn.shards import RowShare
from paddle_edo.optim import TableOptimizer
from paddle_edo.optim.states import TableStates

pytestmark = pytest.mark.skipif(fused_ops() is None, reason="the native kernels cannot be built here")

ROWS, DIM, WORLD = 50, 8, 3


def steps_of_rows(seed: int, count: int = 4):
    """``count`` steps of (distinct increasing global rows, their summed gradients), every share touched."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        rows = np.sort(np.concatenate([rng.choice(np.arange(r, ROWS, WORLD), 4, replace=False) for r in range(WORLD)]))
        yield rows, rng.normal(0.0, 0.1, (len(rows), DIM)).astype(np.float32)


def whole_and_shares(optimizer: TableOptimizer):
    whole = TableStates(optimizer, {"t": (ROWS, DIM)}, "whole")
    shares = [RowShare(rank, WORLD, ROWS) for rank in range(WORLD)]
    return whole, shares, [TableStates(optimizer, {"t": (share.held_rows, DIM)}, f"share {share.rank}")
                           for share in shares]


def held_rows_of(state: np.ndarray, share: RowShare) -> np.ndarray:
    """A whole table's state rows (8-bit records: bytes per row) that ``share`` holds."""
    return state.reshape(ROWS, -1)[share.global_rows()]


@pytest.mark.parametrize("state_dtype", ["bfloat16", "float16", "int8"])
@pytest.mark.parametrize("rule", ["adam", "adagrad", "rowwise_adam"])
def test_a_share_updates_and_rounds_its_rows_as_the_whole_table_does(rule, state_dtype):
    optimizer = TableOptimizer(rule, 0.05, state_dtype=state_dtype)
    whole, shares, share_states = whole_and_shares(optimizer)
    weights = np.random.default_rng(0).normal(0.0, 0.1, (ROWS, DIM)).astype(np.float32)
    whole_weight = paddle.to_tensor(weights)
    share_weights = [paddle.to_tensor(weights[share.global_rows()]) for share in shares]
    for rows, grad in steps_of_rows(1):
        whole.update([whole_weight], [paddle.to_tensor(rows)], [paddle.to_tensor(rows)], paddle.to_tensor(grad),
                     [1], [0], [-1], len(rows))
        for share, states, weight in zip(shares, share_states, share_weights):
            mine = rows % WORLD == share.rank
            local = paddle.to_tensor(rows[mine] // WORLD)
            states.update([weight], [local], [local], paddle.to_tensor(grad[mine]), [1], [0], [-1], int(mine.sum()),
                          [share.place])
    whole_state = whole.state_dict()
    for share, states, weight in zip(shares, share_states, share_weights):
        np.testing.assert_array_equal(weight.numpy(), weights_after := whole_weight.numpy()[share.global_rows()])
        assert np.abs(weights_after - weights[share.global_rows()]).max() > 0  # the rows moved
        for key, value in states.state_dict().items():
            if key.endswith((".state1", ".state2")):
                np.testing.assert_array_equal(value.reshape(share.held_rows, -1), held_rows_of(whole_state[key], share))
            else:  # beta powers and step counts: every share stepped with the whole table
                np.testing.assert_array_equal(value, whole_state[key])


@pytest.mark.parametrize("state_dtype", ["bfloat16", "int8"])
def test_decoded_rows_of_a_share_update_as_the_whole_tables_do(state_dtype):
    """update_rows (a low_precision table's decoded rows) keys the rounding by the whole table's row too."""
    optimizer = TableOptimizer("adam", 0.05, state_dtype=state_dtype)
    whole, shares, share_states = whole_and_shares(optimizer)
    weights = np.random.default_rng(2).normal(0.0, 0.1, (ROWS, DIM)).astype(np.float32)
    for rows, grad in steps_of_rows(3):
        updated = paddle.to_tensor(weights[rows])
        whole.update_rows(updated, paddle.to_tensor(rows), paddle.to_tensor(grad))
        for share, states in zip(shares, share_states):
            mine = rows % WORLD == share.rank
            share_rows = paddle.to_tensor(weights[rows[mine]])
            states.update_rows(share_rows, paddle.to_tensor(rows[mine] // WORLD), paddle.to_tensor(grad[mine]),
                               place=share.place)
            np.testing.assert_array_equal(share_rows.numpy(), updated.numpy()[mine])
        weights[rows] = updated.numpy()
    whole_state = whole.state_dict()
    for share, states in zip(shares, share_states):
        for key in ("t.state1", "t.state2"):
            np.testing.assert_array_equal(states.state_dict()[key].reshape(share.held_rows, -1),
                                          held_rows_of(whole_state[key], share))


def test_a_place_outside_the_whole_table_is_refused():
    states = TableStates(TableOptimizer("adam", 0.05, state_dtype="int8"), {"t": (4, DIM)}, "share")
    rows = paddle.zeros([1, DIM])
    with pytest.raises(Exception, match="first_row < row_stride"):
        states.update_rows(rows, paddle.to_tensor(np.array([0])), paddle.zeros([1, DIM]), place=(3, 2))
    with pytest.raises(EdoValueError, match="serves the state of one table"):
        TableStates(TableOptimizer("adam", 0.05), {"a": (4, DIM), "b": (4, DIM)}, "two").update_rows(
            rows, paddle.to_tensor(np.array([0])), paddle.zeros([1, DIM]))
