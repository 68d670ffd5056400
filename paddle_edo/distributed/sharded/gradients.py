"""The data-parallel half of a sharded step: the replicated parameters (dense layers, tables too small to
shard) see their gradients summed over the ranks, in one all-reduce of one flat buffer, with each rank's
share of the loss riding along (so every rank logs the global batch's loss for the price of one float)."""
from __future__ import annotations

import numpy as np
import paddle
import paddle.distributed as dist

from ...errors import EdoRuntimeError


class GradientSum:
    """Sums ``parameters``' dense gradients over the ranks (each rank's loss already weighted by its share
    of the global batch, the sum is the one-process gradient)."""

    def __init__(self, parameters: list[paddle.Tensor], world_size: int) -> None:
        self.parameters = [p for p in parameters if not p.stop_gradient]
        self.world_size = world_size
        self.bytes_sent = 0

    def __call__(self, loss_share: float) -> float:
        """All-reduce the gradients in place; returns the sum of every rank's ``loss_share``."""
        if self.world_size == 1:
            return loss_share
        grads = []
        for p in self.parameters:
            grad = p._grad_ivar()
            if grad is None or not grad._is_initialized():
                raise EdoRuntimeError(f"sharded training: replicated parameter {p.name} has no gradient this step; "
                                      f"every rank must train every replicated parameter at every step")
            if grad.is_selected_rows():
                raise EdoRuntimeError(f"sharded training: replicated parameter {p.name} has a sparse gradient, which "
                                      f"cannot be all-reduced; replicated tables train with dense gradients")
            grads.append(grad)
        flat = paddle.concat([g.reshape([-1]) for g in grads] + [paddle.to_tensor([loss_share], dtype="float32")])
        dist.all_reduce(flat)
        self.bytes_sent += 2 * (self.world_size - 1) * int(flat.size) * 4 // self.world_size  # ring all-reduce
        sizes = [int(g.size) for g in grads]
        bounds = np.concatenate([[0], np.cumsum(sizes)]).tolist()
        for i, grad in enumerate(grads):
            paddle.assign(flat[bounds[i]:bounds[i + 1]].reshape(grad.shape), output=grad)
        return float(flat[-1])
