"""Read the row gradients of an embedding table after backward, whatever form Paddle left them in."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import paddle


@dataclass
class RowGradients:
    """The distinct rows touched this step and, when asked for, their merged gradients."""

    rows: np.ndarray                 # int64 [U]: sorted and distinct when grads are read, else as looked up
    grads: np.ndarray | None         # float32 [U, D]
    sparse: bool                     # False: the table received a dense [num_rows, D] gradient

    def without(self, row: int) -> "RowGradients | None":
        """The same gradients less one row (the padding row); None if nothing is left."""
        keep = self.rows != row
        if keep.all():
            return self
        if not keep.any():
            return None
        return RowGradients(self.rows[keep], None if self.grads is None else self.grads[keep], self.sparse)


def _merge(rows: np.ndarray, values: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
    """Distinct rows, summing the gradients of repeated ids (a sparse gradient keeps one entry per lookup)."""
    order = np.argsort(rows, kind="stable")
    ordered = rows[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    unique = ordered[starts]
    if values is None:
        return unique, None
    return unique, np.add.reduceat(values[order], starts, axis=0)


def read_row_gradients(layer: paddle.nn.Layer, with_values: bool = True) -> RowGradients | None:
    """Row gradients of one table, or None when it got no gradient this step. Without values only the
    row ids are read (cheap: no tensor leaves the device)."""
    own = getattr(layer, "row_gradients", None)
    if own is not None:  # layers that update their rows themselves (low_precision tables)
        found = own()
        if found is None:
            return None
        values = found[1].numpy().astype(np.float32) if with_values else None
        return RowGradients(*_merge(found[0].numpy(), values), sparse=True)
    weight = getattr(layer, "weight", None)
    if weight is None or weight.stop_gradient:
        return None
    grad = weight._grad_ivar()
    if grad is None or not grad._is_initialized():
        return None
    if grad.is_selected_rows():
        rows = np.asarray(grad.rows(), dtype=np.int64)
        if rows.size == 0:
            return None
        if not with_values:
            return RowGradients(rows, None, sparse=True)
        values = grad._get_tensor_from_selected_rows().astype("float32").numpy()
        return RowGradients(*_merge(rows, values), sparse=True)
    touched = np.flatnonzero((grad != 0).any(axis=1).numpy())
    if touched.size == 0:
        return None
    values = paddle.gather(grad, paddle.to_tensor(touched)).astype("float32").numpy() if with_values else None
    return RowGradients(touched, values, sparse=False)
