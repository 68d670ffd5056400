"""Update-to-weight ratios: saved and compared in place by the native kernel, or copied to numpy (for the
worker thread, large tables by their rows, small ones whole), all equal to the ratio computed directly."""
import numpy as np
import paddle
import pytest

from paddle_edo import kernels
from paddle_edo.monitor.sparse_grad import gradient_tables
from paddle_edo.monitor.update_ratio import SMALL_TABLE_ELEMENTS, SavedRows


class Tables(paddle.nn.Layer):
    def __init__(self) -> None:
        super().__init__()
        self.small = paddle.nn.Embedding(50, 8, sparse=True)
        self.large = paddle.nn.Embedding(SMALL_TABLE_ELEMENTS // 4 + 7, 4, sparse=True)  # copied by its rows
        self.wide = paddle.nn.Embedding(30, 1, sparse=True)


@pytest.mark.parametrize("how", ["in place", "copied as looked up", "without the kernel"])
def test_saved_rows_give_the_direct_update_ratio(monkeypatch, how):
    paddle.seed(3)
    model = Tables()
    tables = gradient_tables(model)
    rng = np.random.default_rng(5)
    looked_up = {table.name: rng.integers(0, table.rows, 40) for table in tables}  # with repeats
    distinct = {name: np.unique(ids) for name, ids in looked_up.items()}
    if how == "without the kernel":
        monkeypatch.setitem(kernels._functions, "edo_save_rows", None)
    by_lookup = how == "copied as looked up"
    rows = looked_up if by_lookup else distinct
    saved = SavedRows([(i, table, rows[table.name]) for i, table in enumerate(tables)], distinct=not by_lookup)
    assert len(saved.in_place) == (3 if how == "in place" else 0)
    before = {table.name: table.layer.weight.numpy() for table in tables}
    with paddle.no_grad():  # an optimizer step, in place, that touches other rows too
        for table in tables:
            table.layer.weight.set_value(table.layer.weight * 1.5 + 0.25)
    ratios = dict(saved.ratios(saved.after(), {i: distinct[table.name] for i, table in enumerate(tables)}))
    for i, table in enumerate(tables):
        rows = distinct[table.name]
        old, new = before[table.name][rows].astype(np.float64), table.layer.weight.numpy()[rows].astype(np.float64)
        assert ratios[i] == pytest.approx(np.linalg.norm(new - old) / np.linalg.norm(old), rel=1e-5), table.name
