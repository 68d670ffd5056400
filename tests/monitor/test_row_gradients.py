"""Row-gradient summaries: the native kernel (kernels/row_norms.cc) against the numpy reference and
against a direct computation."""
import numpy as np
import pytest

import paddle_edo.kernels as kernels
from paddle_edo.monitor.row_gradients import RowGradients, summarize


def planted_gradients(vocab: int) -> list[tuple[RowGradients, int | None]]:
    """Twin tables (8 and 1 wide) sharing their lookups with padding, a lone table, a table that looked up
    only padding, and a table with NaN and Inf entries; ``vocab`` sets the span of the rows."""
    rng = np.random.default_rng(0)
    shared = rng.integers(0, min(vocab, 300), 2000) * (vocab // min(vocab, 300))
    lone = rng.integers(0, vocab, 700)
    padded = np.zeros(50, dtype=np.int64)
    broken = rng.integers(1, 40, 400)
    values = {name: rng.normal(size=(rows.size, width)).astype(np.float32) * rng.uniform(0.01, 10, (rows.size, 1))
              .astype(np.float32) for name, rows, width in [("twin", shared, 8), ("first_order", shared, 1),
                                                             ("lone", lone, 16), ("padded", padded, 4),
                                                             ("broken", broken, 4)]}
    values["broken"][[3, 50]] = np.nan
    values["broken"][7, 2] = np.inf
    return [(RowGradients(shared, values["twin"], True), 0), (RowGradients(shared, values["first_order"], True), 0),
            (RowGradients(lone, values["lone"], True), None), (RowGradients(padded, values["padded"], True), 0),
            (RowGradients(broken, values["broken"], True), None)]


def direct_norms(grads: RowGradients, padding: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(distinct rows, the norm of each row's summed gradient in float64)."""
    kept = grads.rows != padding
    rows, inverse = np.unique(grads.rows[kept], return_inverse=True)
    sums = np.zeros((rows.size, grads.grads.shape[1]))
    np.add.at(sums, inverse, grads.grads[kept].astype(np.float64))
    return rows, np.sqrt((sums ** 2).sum(axis=1))


@pytest.mark.parametrize("vocab", [400, 10**9])  # rows in a narrow span (counting sort) or a wide one
def test_the_native_summary_equals_the_numpy_reference_and_the_direct_norms(monkeypatch, vocab):
    assert kernels.c_function("edo_summarize_groups") is not None  # built by `make test` (a C++ compiler is at hand)
    gradients = planted_gradients(vocab)
    native = summarize(gradients)
    monkeypatch.setitem(kernels._functions, "edo_summarize_groups", None)
    reference = summarize(gradients)
    assert native[3] is None and reference[3] is None  # only padding was looked up
    for (grads, padding), mine, theirs in zip(gradients, native, reference):
        if mine is None:
            continue
        rows, norms = direct_norms(grads, padding)
        finite = np.isfinite(norms)
        np.testing.assert_array_equal(mine.rows, rows)
        np.testing.assert_array_equal(mine.rows, theirs.rows)
        np.testing.assert_array_equal(mine.bad_rows, rows[~finite])
        np.testing.assert_array_equal(mine.bad_rows, theirs.bad_rows)
        # float32 sums (in lookup order here, pairwise in numpy's one-wide case) against float64 ones: rows
        # whose entries cancel out differ by float32's rounding of the entries' scale
        scale = 1e-6 * np.abs(grads.grads[np.isfinite(grads.grads)]).max()
        np.testing.assert_allclose(np.sort(mine.norms), np.sort(norms[finite]), rtol=1e-5, atol=scale)
        np.testing.assert_allclose(np.sort(mine.norms), theirs.norms, rtol=1e-5, atol=scale)
        expected = {"mean": norms[finite].mean(), "max": norms[finite].max(), "p99": np.percentile(norms[finite], 99)}
        for figure, value in expected.items():
            assert getattr(mine, figure) == pytest.approx(value, rel=1e-5)
            assert getattr(mine, figure) == pytest.approx(getattr(theirs, figure), rel=1e-5)
    assert native[4].bad_rows.size and native[4].sparse


def test_a_deduplicating_table_never_passes_its_lookups_off_as_gradient_rows():
    """Its gradient has each row once, sorted: a first batch of sorted distinct ids matches its lookups,
    a later one of distinct ids in another order must still be read."""
    import paddle

    from paddle_edo.monitor.row_gradients import RowGradientReader
    from paddle_edo.nn import DenseEmbedding

    table = DenseEmbedding(10, 2)
    read = RowGradientReader(table)
    for ids in ([3, 7], [9, 2]):
        table.weight.clear_gradient()
        (table(paddle.to_tensor(ids)) * paddle.to_tensor([[1.0, 1.0], [2.0, 2.0]])).sum().backward()
        grads = read(lookups=np.array(ids, dtype=np.int64))
        by_row = dict(zip(grads.rows.tolist(), grads.grads[:, 0].tolist()))
        assert by_row == {ids[0]: 1.0, ids[1]: 2.0}
