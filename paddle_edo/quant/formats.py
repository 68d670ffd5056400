"""Storage formats of quantized tables: how many bits a value takes and what each row keeps beside it."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import EdoValueError


@dataclass(frozen=True)
class QuantFormat:
    """One storage format.

    Float formats store the table in that dtype. Code formats pack ``values_per_byte`` codes of base
    ``base`` into each byte (int8 one code, int4 two, int2 four, ternary five base-3 digits, binary
    eight signs) and keep per-row fp16 parameters: scale and bias (asymmetric intN) or scale only
    (symmetric ternary and binary).
    """

    name: str
    float_dtype: str | None = None   # fp16 / bf16: the table's own dtype
    base: int = 0                    # levels per code
    values_per_byte: int = 0
    row_params: int = 0              # fp16 numbers per row: 2 = scale + bias, 1 = scale

    @property
    def is_float(self) -> bool:
        return self.float_dtype is not None

    @property
    def symmetric(self) -> bool:
        return self.row_params == 1

    def code_bytes(self, dim: int) -> int:
        """Bytes of one row's codes (or of one fp16/bf16 row)."""
        if self.is_float:
            return 2 * dim
        return -(-dim // self.values_per_byte)

    def row_bytes(self, dim: int) -> int:
        """Bytes one row takes, per-row parameters included."""
        return self.code_bytes(dim) + 2 * self.row_params

    def level_values(self) -> np.ndarray:
        """The number each code digit decodes to before scale and bias."""
        if self.name == "ternary":
            return np.array([-1.0, 0.0, 1.0], dtype=np.float32)
        if self.name == "binary":
            return np.array([-1.0, 1.0], dtype=np.float32)
        return np.arange(self.base, dtype=np.float32)

    def byte_table(self) -> np.ndarray:
        """[256, values_per_byte] float32: byte b (stored as int8 b - 128) -> the level values of its digits."""
        digits = np.arange(256)[:, None] // self.base ** np.arange(self.values_per_byte)[None, :] % self.base
        return self.level_values()[digits]


FORMATS: dict[str, QuantFormat] = {
    "fp16": QuantFormat("fp16", float_dtype="float16"),
    "bf16": QuantFormat("bf16", float_dtype="bfloat16"),
    "int8": QuantFormat("int8", base=256, values_per_byte=1, row_params=2),
    "int4": QuantFormat("int4", base=16, values_per_byte=2, row_params=2),
    "int2": QuantFormat("int2", base=4, values_per_byte=4, row_params=2),
    "ternary": QuantFormat("ternary", base=3, values_per_byte=5, row_params=1),
    "binary": QuantFormat("binary", base=2, values_per_byte=8, row_params=1),
}


FORMAT_NUMBERS = {name: number for number, name in enumerate(FORMATS)}  # the native kernels' numbering


def get_format(name: str, owner: str = "dtype") -> QuantFormat:
    """The storage format ``name`` (a key of FORMATS); EdoValueError naming ``owner`` and the formats else."""
    if name not in FORMATS:
        raise EdoValueError(f"{owner} = {name!r} is not supported; supported: {', '.join(FORMATS)}")
    return FORMATS[name]
