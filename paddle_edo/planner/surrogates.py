"""A trained fp32 table as each compressed layer would hold it, built without training that layer: the
packed formats and clustering exactly as packing makes them; hashing, QR and mixed dimensions as the
least-squares fit of their shared rows to the trained ones (weighted by how often each id occurs), an
estimate of what training them would reach."""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import numpy as np
import paddle
import scipy.sparse

from ..nn import EmbeddingBase, TableSpec
from ..nn.shared import hash_ids_numpy

FIT_ROUNDS = 10   # alternating least-squares rounds (QR)
CG_ROUNDS = 10    # preconditioned conjugate-gradient rounds (hashing): as close a fit as 20 plain rounds, or closer
RIDGE = 1e-3      # shrinks shared rows that few occurrences reach toward zero


def fitted_table(section: dict[str, Any], weight: np.ndarray, frequencies: np.ndarray,
                 padding_idx: int | None = 0, fits: dict | None = None) -> EmbeddingBase:
    """The layer ``section`` (an embedding section at the table's width) builds for a table of
    ``len(weight)`` ids, holding its estimate of the trained rows ``weight`` [N, D], packed as training
    would leave it. ``fits``: fitted rows kept between calls for the same table (sections that differ in
    ``storage_format`` alone share one fit, and mixed dimensions of the same blocks their principal axes)."""
    num_embeddings, dim = weight.shape
    spec = TableSpec.from_section({**section, "dim": dim})
    build = dict(spec.section())
    if build["type"] == "quantized":
        build["mode"] = "ptq"  # QAT's master table trains as fp32 does; packing is what is estimated
    with _zero_initialised():  # every row is set below: drawing normal initial values would be wasted
        layer = TableSpec.from_section(build).build(num_embeddings, padding_idx, frequencies)
    weights = np.array(frequencies, dtype=np.float64)
    if padding_idx is not None:
        weights[padding_idx] = 0.0
    key = repr(sorted((k, v) for k, v in build.items() if k != "storage_format"))
    with paddle.no_grad():
        if fits is not None and key in fits:
            layer.set_state_dict(fits[key])
        else:
            _fill(layer, weight, weights, {} if fits is None else fits)
            if fits is not None:
                fits[key] = {name: value.numpy() for name, value in layer.state_dict().items()}
    layer.pack()
    layer.eval()
    return layer


@contextlib.contextmanager
def _zero_initialised() -> Iterator[None]:
    """Within, new parameters start at zero (Paddle's global initializer)."""
    paddle.nn.initializer.set_global_initializer(paddle.nn.initializer.Constant(0.0))
    try:
        yield
    finally:
        paddle.nn.initializer.set_global_initializer(None)


def _fill(layer: EmbeddingBase, weight: np.ndarray, weights: np.ndarray, fits: dict) -> None:
    kind = layer.registry_name
    if kind in ("dense", "quantized"):
        layer.weight.set_value(weight)
    elif kind == "clustered":
        layer.table.weight.set_value(weight)
    elif kind == "hash":
        layer.table.weight.set_value(fit_hashed_rows(weight, weights, layer.num_buckets,
                                                     layer.coefficients.numpy(), layer.combine).astype(np.float32))
    elif kind == "qr":
        quotient, remainder = fit_quotient_remainder(weight, weights, layer.num_collisions, layer.operation)
        layer.quotient.weight.set_value(quotient.astype(np.float32))
        layer.remainder.weight.set_value(remainder.astype(np.float32))
    elif kind == "mixed_dim":
        fit_mixed_dims(layer, weight, weights, fits.setdefault("mixed_dim axes", {}))
    else:
        raise NotImplementedError(f"no estimate of a trained {kind!r} table")


class BucketSums:
    """Sums by bucket of rows [n, D] (``index`` [m] in [0, buckets): entry j adds row ``source[j]``, row j
    when no source is given) as a sparse [buckets, n] incidence matrix times the rows, and the transposed
    product, each bucket's row added back to the rows in it (measured: 0.74 ms for 120,000 entries of width
    16 into 30,000 buckets, against 3.5 ms by one bincount over the entries' (bucket, column) cells)."""

    def __init__(self, index: np.ndarray, buckets: int, source: np.ndarray | None = None,
                 rows: int | None = None) -> None:
        columns = np.arange(len(index)) if source is None else source
        shape = (buckets, len(index) if source is None else rows)
        self.matrix = scipy.sparse.csr_array((np.ones(len(index), np.float32), (index, columns)), shape=shape)
        self._transposed: scipy.sparse.csr_array | None = None

    def __call__(self, values: np.ndarray) -> np.ndarray:
        return self.matrix @ values

    def spread(self, table: np.ndarray) -> np.ndarray:
        """Row i: the sum of the buckets' rows ``table`` [buckets, D] that row i adds to."""
        if self._transposed is None:
            self._transposed = self.matrix.T.tocsr()
        return self._transposed @ table


def _bucket_mean(sums: BucketSums, values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Per bucket, the weighted mean of the values [n, D] of the rows in it (ridge-shrunk to zero)."""
    return sums(weights[:, None] * values) / (sums(weights[:, None]) + RIDGE)


def fit_hashed_rows(weight: np.ndarray, weights: np.ndarray, buckets: int, coefficients: np.ndarray,
                    combine: str) -> np.ndarray:
    """Shared rows T [buckets, D] such that combining (summing, or averaging) T at each id's hashes gives
    its trained row: the weighted least-squares solution (ridge-regularised, so buckets no id reaches
    stay zero), by conjugate gradients on the normal equations, preconditioned by their diagonal (each
    bucket's weight: under Zipf ids those span orders of magnitude), in float32 (an estimate: the fit's
    last digits do not matter, its memory traffic does)."""
    if combine not in ("sum", "mean"):
        raise NotImplementedError(f"no estimate of hashed rows combined by {combine!r}")
    seen = np.flatnonzero(weights > 0)        # ids that never occur add nothing to the squares
    target = weight[seen].astype(np.float32)
    # buckets no id reaches stay zero: solve for the reached ones only, numbered 0 .. len(reached)
    reached, index = np.unique(hash_ids_numpy(seen, coefficients, buckets), return_inverse=True)
    index = index.reshape(len(seen), len(coefficients))                       # [n, k]
    hashes = index.shape[1]
    factor = float(hashes) if combine == "mean" else 1.0
    scale = (weights[seen] / factor ** 2).astype(np.float32)[:, None]
    sums = BucketSums(index.T.reshape(-1), len(reached), source=np.tile(np.arange(len(seen)), hashes),
                      rows=len(seen))
    inverse_diagonal = 1.0 / (sums(scale) + np.float32(RIDGE))               # [reached, 1]

    def normal(table: np.ndarray) -> np.ndarray:                              # (A^T W A + ridge) T
        return sums(scale * sums.spread(table)) + np.float32(RIDGE) * table   # spread: factor x A T

    def dot(a: np.ndarray, b: np.ndarray) -> float:
        return float(np.dot(a.ravel(), b.ravel()))

    table = np.zeros((len(reached), target.shape[1]), dtype=np.float32)
    residual = sums(scale * factor * target)                                  # A^T W w
    preconditioned = inverse_diagonal * residual
    direction = preconditioned.copy()
    size = dot(residual, preconditioned)
    for _ in range(CG_ROUNDS):
        if size <= 1e-20:
            break
        product = normal(direction)
        step = size / dot(direction, product)
        table += np.float32(step) * direction
        residual -= np.float32(step) * product
        preconditioned = inverse_diagonal * residual
        new_size = dot(residual, preconditioned)
        direction = preconditioned + np.float32(new_size / size) * direction
        size = new_size
    shared = np.zeros((buckets, target.shape[1]), dtype=np.float32)
    shared[reached] = table
    return shared


def fit_quotient_remainder(weight: np.ndarray, weights: np.ndarray, collisions: int, operation: str
                           ) -> tuple[np.ndarray, np.ndarray]:
    """Quotient and remainder rows whose product (or sum, or concatenation) gives each id's trained row,
    by alternating weighted least squares."""
    n, dim = weight.shape
    rows_q = -(-n // collisions)
    seen = np.flatnonzero(weights > 0)        # ids that never occur add nothing to the squares
    weight, weights = weight[seen], weights[seen]
    q_index, r_index = seen // collisions, seen % collisions
    by_quotient, by_remainder = BucketSums(q_index, rows_q), BucketSums(r_index, collisions)  # for every round
    if operation == "concat":
        half = dim // 2
        return (_bucket_mean(by_quotient, weight[:, :half], weights),
                _bucket_mean(by_remainder, weight[:, half:], weights))
    if operation == "add":
        remainder = np.zeros((collisions, dim))
        for _ in range(FIT_ROUNDS):
            quotient = _bucket_mean(by_quotient, weight - remainder[r_index], weights)
            remainder = _bucket_mean(by_remainder, weight - quotient[q_index], weights)
        return quotient, remainder
    remainder = np.ones((collisions, dim))
    for _ in range(FIT_ROUNDS):
        quotient = _ratio_fit(by_quotient, weight, remainder[r_index], weights)
        remainder = _ratio_fit(by_remainder, weight, quotient[q_index], weights)
    return quotient, remainder


def _ratio_fit(sums: BucketSums, target: np.ndarray, other: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """Per row r and column j, the least-squares x with target ~ x * other over the ids of r (``sums``: by
    r)."""
    return sums(weights[:, None] * target * other) / (sums(weights[:, None] * other ** 2) + RIDGE)


def fit_mixed_dims(layer: EmbeddingBase, weight: np.ndarray, weights: np.ndarray, axes: dict | None = None
                   ) -> None:
    """Each block's rows and projection from a weighted principal-component fit of its ids' trained rows.
    ``axes``: each block's rows and principal axes by its (start, end) in the ranking, kept between calls
    for the same table (layouts that differ in alpha alone cut the same blocks to other widths)."""
    axes = {} if axes is None else axes
    rank = layer.rank.numpy()                                                 # a permutation of the ids
    order = np.empty_like(rank)
    order[rank] = np.arange(len(rank), dtype=rank.dtype)                      # ids by rank
    starts = [0, *layer.block_ends[:-1]]
    for block, projection, start, end in zip(layer.blocks, layer.projections, starts, layer.block_ends):
        if (start, end) not in axes:
            ids = order[start:end]
            rows = weight[ids].astype(np.float32, copy=False)
            weighted = rows * (weights[ids] + RIDGE).astype(np.float32)[:, None]
            scatter = (weighted.T @ rows).astype(np.float64)                  # [D, D], weighted second moments
            _, vectors = np.linalg.eigh(scatter)                              # ascending eigenvalues
            axes[start, end] = rows, vectors[:, ::-1].T.astype(np.float32)    # [D, D], largest first
        rows, principal = axes[start, end]
        table = np.zeros((end - start + 1, block.embedding_dim), dtype=np.float32)
        if isinstance(projection, paddle.nn.Linear):
            basis = principal[:block.embedding_dim]                           # [width, D], orthonormal rows
            table[:-1] = rows @ basis.T
            projection.weight.set_value(basis)
        else:
            table[:-1] = rows
        block.weight.set_value(table)
