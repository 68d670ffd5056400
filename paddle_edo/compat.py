"""The ways Paddle runs a layer's code, the Paddle behaviours the layers work around, and what differs
between Paddle 2.6.2 and 3.x, in one place.

Three ways run a layer's Python code:
  - dynamic graph: tensors hold values;
  - ``paddle.jit.to_static`` in its default mode (SOT, a bytecode translator): the code is simulated to
    record static graphs. ``paddle.in_dynamic_mode()`` is True there, yet tensors hold no values;
  - a static program (``full_graph=True``, ``jit.save``, parameter-server programs): no values at all.

Measured on Paddle 2.6.2: a sparse (SelectedRows) parameter gradient produced inside a to_static program
is dropped in both modes, so a table with ``sparse=True`` never trains there (``paddle.nn.Embedding`` too,
once SOT really compiles its graph rather than falling back for graphs under 10 ops).

Between 2.6.2 and 3.3.1 (measured on both): ``paddle.round`` rounds ties away from zero on 2.6.2 and to even
on 3.x (``round_half_away``); a tensor divided by a Python number is multiplied by the number's fp32
reciprocal on 2.6.2 and divided on 3.x (the codecs multiply by the reciprocal explicitly); the CPU wheels
on PyPI carry parameter servers up to 3.1.0 only (``has_parameter_servers``).
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


def round_half_away(x: paddle.Tensor) -> paddle.Tensor:
    """Round to the nearest integer, ties away from zero, on every Paddle: ``paddle.round`` does so on
    2.6.2 but rounds ties to even from 3.x on. The codecs' packed rows, and the kernels that reproduce
    them bit for bit, use this rounding. (x - trunc(x) is exact in fp32, so the ties are found exactly.)"""
    whole = paddle.trunc(x)
    tie = paddle.abs(x - whole) == 0.5
    return paddle.where(tie, whole + paddle.sign(x), paddle.round(x))


PADDLE_MAJOR = int(paddle.__version__.split(".")[0])
PIR_PROGRAMS = PADDLE_MAJOR >= 3  # jit.save writes, and Paddle Inference reads, PIR programs


def has_parameter_servers() -> bool:
    """Whether this Paddle build can run Fleet parameter-server jobs: 2.6.2's wheels and the 3.x builds
    with PS support; the CPU wheels on PyPI from 3.1.1 on carry none."""
    core = paddle.base.core
    return bool(core.is_compiled_with_distribute() and hasattr(core, "DistFleetWrapper"))


PARAMETER_SERVER_BUILDS = "paddlepaddle==2.6.2 (CPU or GPU), or a Paddle 3 build with parameter-server support"
