"""The ways Paddle runs a layer's code, and the Paddle behaviours the layers work around, in one place.

Three ways run a layer's Python code:
  - dynamic graph: tensors hold values;
  - ``paddle.jit.to_static`` in its default mode (SOT, a bytecode translator): the code is simulated to
    record static graphs. ``paddle.in_dynamic_mode()`` is True there, yet tensors hold no values;
  - a static program (``full_graph=True``, ``jit.save``, parameter-server programs): no values at all.

Measured on Paddle 2.6.2: a sparse (SelectedRows) parameter gradient produced inside a to_static program
is dropped in both modes, so a table with ``sparse=True`` never trains there (``paddle.nn.Embedding`` too,
once SOT really compiles its graph rather than falling back for graphs under 10 ops).
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, TypeVar

import paddle
from paddle.jit.sot import psdb

Forward = TypeVar("Forward", bound=Callable[..., Any])


def in_sot() -> bool:
    """Whether SOT is simulating this code (True only inside its simulation)."""
    return psdb.in_sot()


def dynamic_graph_under_sot(forward: Forward) -> Forward:
    """``Layer.forward`` decorator: under SOT the call runs in dynamic graph as one piece (a graph break
    around it) while SOT compiles the model around it. Tables then behave exactly as in dynamic graph: ids
    are range-checked, gradients are sparse rows of distinct ids, caches and row-updated tables work."""
    @functools.wraps(forward)
    def run(self, *args: Any, **kwargs: Any) -> Any:
        if in_sot():
            return _in_dynamic_graph(forward, self, *args, **kwargs)
        return forward(self, *args, **kwargs)
    run.__signature__ = inspect.signature(forward)  # to_static reads the arguments with getfullargspec
    return run  # type: ignore[return-value]


def _in_dynamic_graph(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    psdb.fallback()  # SOT stops simulating here and runs this frame in dynamic graph ...
    translator = paddle.framework.core.set_eval_frame(None)  # ... and the frames it calls (as psdb.breakpoint)
    try:
        return function(*args, **kwargs)
    finally:
        paddle.framework.core.set_eval_frame(translator)


def sparse_gradient(sparse: bool) -> bool:
    """Whether a lookup may ask for a sparse row gradient: not in a whole-graph to_static program, which
    would drop it (see above). There the table takes a dense gradient (a table-sized tensor, as Paddle 3's
    PIR programs give), so it trains; parameter-server programs keep their sparse tables."""
    return sparse and not paddle.base.dygraph.base.in_to_static_mode()
