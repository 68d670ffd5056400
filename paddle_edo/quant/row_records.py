"""Rows kept packed outside a table layer (a cached table's host store): fp32 rows to fixed-size byte
records (a format's codes, then its fp16 row parameters) and back, re-encoded with stochastic rounding keyed
by each row's place in the whole table, as a low_precision table re-encodes its rows."""
from __future__ import annotations

import numpy as np
import paddle

from ..errors import EdoValueError
from ..kernels import fused_ops, kernels_serve
from ..keyed_random import keyed_uniform
from . import codecs
from .formats import FORMAT_NUMBERS, QuantFormat, get_format

RECORD_FORMATS = ("fp16", "int8")  # formats a row record takes (bf16 has no numpy dtype to hand the bytes over)


def encode_nearest(rows: paddle.Tensor, fmt: QuantFormat, iterations: int = 0
                   ) -> tuple[paddle.Tensor, paddle.Tensor | None]:
    """codecs.encode of fp32 rows [n, dim] rounded to nearest (intN on search_range's grid after
    ``iterations`` rounds, min-max ranges at 0): by the native kernels for intN and 16-bit float rows on
    the CPU (the same bytes), else by Paddle's composite ops."""
    if fmt.row_params == 2 and paddle.in_dynamic_mode() and kernels_serve(rows, rows):
        return fused_ops().edo_encode_rows(rows, FORMAT_NUMBERS[fmt.name], iterations)
    if fmt.is_float and paddle.in_dynamic_mode() and kernels_serve(rows, rows):
        # the values on the 16-bit grid (rounded as codecs.round_to_float rounds), then a cast that is exact
        grid = fused_ops().edo_fake_quantize(rows, FORMAT_NUMBERS[fmt.name], 0)
        return grid.astype(fmt.float_dtype), None
    ranges = codecs.search_range(rows, fmt, iterations) if iterations else None
    return codecs.encode(rows, fmt, ranges=ranges)


class RowRecords:
    """fp32 rows of ``dim`` values <-> uint8 records of ``record_bytes``: ``fmt``'s codes (fp16: the values;
    int8: a code a value), then its fp16 row parameters (int8: scale and bias, min-max). EdoValueError,
    naming ``owner``, for a format outside RECORD_FORMATS."""

    def __init__(self, fmt: str, dim: int, owner: str = "RowRecords") -> None:
        if fmt not in RECORD_FORMATS:
            raise EdoValueError(f"{owner} = {fmt!r}: packed rows take {', '.join(map(repr, RECORD_FORMATS))}")
        self.format, self.dim = get_format(fmt, owner), dim
        self.code_bytes = dim * 2 if self.format.is_float else dim
        self.record_bytes = self.code_bytes + 2 * self.format.row_params

    def encode(self, rows: np.ndarray, global_rows: np.ndarray | None = None, seed: int | None = None) -> np.ndarray:
        """float32 [n, dim] -> uint8 [n, record_bytes]: rounded to nearest without ``seed`` (fresh rows),
        else stochastically (unbiased) with uniform noise keyed by (``seed``, the rows' ``global_rows``,
        column), the noise a low_precision table's row write draws."""
        tensor = paddle.to_tensor(np.ascontiguousarray(rows, dtype=np.float32))
        if seed is None:
            codes, params = encode_nearest(tensor, self.format)
        else:
            noise = paddle.to_tensor(keyed_uniform(seed, np.asarray(global_rows, dtype=np.int64), self.dim))
            codes, params = codecs.encode(tensor, self.format, stochastic=True, noise=noise)
        records = np.empty((len(rows), self.record_bytes), dtype=np.uint8)
        records[:, : self.code_bytes] = codes.numpy().view(np.uint8).reshape(len(rows), self.code_bytes)
        if params is not None:
            records[:, self.code_bytes:] = params.numpy().view(np.uint8).reshape(len(rows), -1)
        return records

    def decode(self, records: np.ndarray) -> np.ndarray:
        """uint8 [n, record_bytes] -> float32 [n, dim], as a low_precision table of the format decodes."""
        codes = np.ascontiguousarray(records[:, : self.code_bytes])
        if self.format.is_float:
            return codes.view(np.float16).astype(np.float32)
        params = paddle.to_tensor(np.ascontiguousarray(records[:, self.code_bytes:]).view(np.float16))
        return codecs.decode(paddle.to_tensor(codes.view(np.int8)), params, self.format, self.dim).numpy()

    def split(self, records: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(codes, fp16 row parameters) of records, as a QuantizedEmbedding of the format holds them."""
        codes = np.ascontiguousarray(records[:, : self.code_bytes])
        codes = codes.view(np.float16) if self.format.is_float else codes.view(np.int8)
        params = np.ascontiguousarray(records[:, self.code_bytes:]).view(np.float16) if self.format.row_params else None
        return codes, params

    def join(self, codes: np.ndarray, params: np.ndarray | None) -> np.ndarray:
        """Records of codes and row parameters (``split``'s inverse)."""
        records = np.empty((len(codes), self.record_bytes), dtype=np.uint8)
        records[:, : self.code_bytes] = np.ascontiguousarray(codes).view(np.uint8).reshape(len(codes), -1)
        if self.format.row_params:
            records[:, self.code_bytes:] = np.ascontiguousarray(params, dtype=np.float16).view(np.uint8).reshape(
                len(codes), -1)
        return records
