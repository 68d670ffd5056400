"""The rules a table-batched collection applies in its backward pass, row by row, as Paddle's sparse
optimizers update a row of merged gradient (so a fused table trains as a per-table layer with Paddle's
optimizer does), plus the row-wise rules of FBGEMM: row-wise Adagrad, its default for embeddings (one
accumulator per row), and row-wise Adam (its PARTIAL_ROWWISE_ADAM: a first moment per value, or none
with beta1 = 0, and a second moment per row)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import EdoValueError

# name -> the kernel's rule number (collection.cc)
FUSED_RULES = {"sgd": 0, "adagrad": 1, "rowwise_adagrad": 2, "adam": 3, "rowwise_adam": 4}
# Paddle's defaults for its optimizers of the same name; row-wise Adagrad takes FBGEMM's
DEFAULT_EPSILON = {"sgd": 0.0, "adagrad": 1e-6, "rowwise_adagrad": 1e-8, "adam": 1e-8, "rowwise_adam": 1e-8}
STEP_COUNTED = ("adam", "rowwise_adam")  # rules that keep beta1^t and beta2^t per table
# how the state is kept -> the kernel's number (optimizer_states.h); 16-bit states are stored as their int16 bits,
# 8-bit ones as int8 records of a row's codes and its fp32 scale
STATE_DTYPES = {"float32": 0, "bfloat16": 1, "float16": 2, "int8": 3}
SCALE_BYTES = 4  # an 8-bit row's scale


@dataclass(frozen=True)
class TableOptimizer:
    """One table's rule and hyper-parameters. Adam and row-wise Adam are lazy (only the batch's rows move,
    with one step count per table); row-wise Adam with ``beta1 = 0`` keeps no first moment (4 bytes of
    state per row); Adagrad's accumulators start at 0.

    ``state_dtype``: the state in fp32, or in 16 bits (``bfloat16``: fp32's range; ``float16``: clipped to
    65504 and flushed to zero below 2^-24, so that sums of squares, Adagrad's accumulators and Adam's
    second moments, whose small gradients' squares fall below it, are kept as their square roots) at half the
    bytes: the rule runs in fp32 on each row's state and writes it back stochastically rounded (unbiased,
    so that an accumulator's small increments are kept on average; the random bits hash the value, its
    place and the table's step count, so a resumed run goes on exactly). The step counts stay as they are.
    ``int8``: 8 bits a value, blockwise quantized with one block per row (the row's values over an fp32
    scale, in an 8-bit float code: sign, 4 exponent and 3 mantissa bits for Adam's first moment; 4 and 4
    for the square roots of sums of squares), stochastically rounded too; a row's single value (row-wise
    Adagrad's accumulator, row-wise Adam's second moment, a table of dimension 1) stays fp32.

    ``weight_decay``: L2 on the batch's rows, ``g + weight_decay * w`` before the rule (FBGEMM's
    ``WeightDecayMode.L2``), so that it stays sparse. Paddle's optimizers given ``weight_decay`` add it to a
    sparse gradient densely: every row of the table decays (and, with Adam, moves) every step."""

    name: str
    learning_rate: float
    epsilon: float | None = None
    beta1: float = 0.9
    beta2: float = 0.999
    weight_decay: float = 0.0
    state_dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.name not in FUSED_RULES:
            raise EdoValueError(f"table optimizer {self.name!r} is not fused; fused: {', '.join(FUSED_RULES)}")
        if not self.learning_rate >= 0:
            raise EdoValueError(f"table optimizer {self.name}: learning_rate = {self.learning_rate} must be >= 0")
        if not (0 <= self.beta1 < 1 and 0 <= self.beta2 < 1):
            raise EdoValueError(f"table optimizer {self.name}: beta1 = {self.beta1}, beta2 = {self.beta2} must be in "
                                f"[0, 1)")
        if self.state_dtype not in STATE_DTYPES:
            raise EdoValueError(f"table optimizer {self.name}: state_dtype = {self.state_dtype!r}; expected one of "
                                f"{', '.join(map(repr, STATE_DTYPES))}")
        if not self.weight_decay >= 0:
            raise EdoValueError(f"table optimizer {self.name}: weight_decay = {self.weight_decay} must be >= 0")
        if self.epsilon is None:
            object.__setattr__(self, "epsilon", DEFAULT_EPSILON[self.name])

    @property
    def counts_steps(self) -> bool:
        return self.name in STEP_COUNTED

    @property
    def rule(self) -> int:
        return FUSED_RULES[self.name]

    def state_shapes(self, rows: int, dim: int) -> tuple[list[int], list[int]]:
        """Shapes of the rule's two state tensors for a [rows, dim] table ([0]: none), in ``stored_dtype``:
        8-bit states hold a row's dim codes and its fp32 scale ([rows, dim + 4] int8), or a row's single
        value (row-wise rules, dim 1) as its fp32 bytes ([rows, 4] int8)."""
        per_value = [rows, dim + SCALE_BYTES if dim > 1 else 4] if self.state_dtype == "int8" else [rows, dim]
        per_row = [rows, 4] if self.state_dtype == "int8" else [rows]
        momentum = per_value if self.beta1 > 0 else [0]
        return {"sgd": ([0], [0]), "adagrad": (per_value, [0]), "rowwise_adagrad": (per_row, [0]),
                "adam": (per_value, per_value), "rowwise_adam": (momentum, per_row)}[self.name]

    def state_bytes(self, rows: int, dim: int) -> int:
        """Bytes of the table's optimizer state: its values, the two fp32 step counts of Adam's rules, and
        the int64 step count of compressed states' rounding."""
        first, second = self.state_shapes(rows, dim)
        counts = (8 if self.counts_steps else 0) + (8 if self.rounds_stochastically else 0)
        itemsize = {"float32": 4, "int16": 2, "int8": 1}[self.stored_dtype]
        return itemsize * (_count(first) + _count(second)) + counts

    @property
    def rounds_stochastically(self) -> bool:
        """Whether it keeps compressed state values (and a step count for their rounding)."""
        return self.state_dtype != "float32" and self.name != "sgd"

    @property
    def stored_dtype(self) -> str:
        """The dtype of the state tensors: float32, int16 holding 16-bit floats' bits, or int8 records."""
        return {"float32": "float32", "bfloat16": "int16", "float16": "int16", "int8": "int8"}[self.state_dtype]

    @property
    def state_format(self) -> int:
        return STATE_DTYPES[self.state_dtype]

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "learning_rate": self.learning_rate, "epsilon": self.epsilon,
                "beta1": self.beta1, "beta2": self.beta2, "weight_decay": self.weight_decay,
                "state_dtype": self.state_dtype}


def _count(shape: list[int]) -> int:
    total = 1
    for size in shape:
        total *= size
    return total
