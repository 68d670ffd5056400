"""Random values that are a function of (a seed, a table's global row, a column): uniform noise for
stochastic rounding and normal initial rows, the same for a row wherever it is made, in one process or on
the rank that owns it in a sharded job (where each owner makes only its rows, so that draws from one stream
would differ)."""
from __future__ import annotations

import contextlib
import contextvars
import zlib
from typing import Iterator

import numpy as np
import paddle

from .kernels import address, c_function

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1, _MIX2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def keyed_uniform(seed: int, rows: np.ndarray, dim: int) -> np.ndarray:
    """float32 [len(rows), dim] in [0, 1): splitmix64 of (seed, row * dim + column), its top 24 bits (by the
    native kernel where it can be had: the same bits)."""
    native = _native_draws("edo_keyed_uniform", seed, rows, dim)
    return native if native is not None else _numpy_keyed_uniform(seed, rows, dim)


def _numpy_keyed_uniform(seed: int, rows: np.ndarray, dim: int) -> np.ndarray:
    keys = (np.asarray(rows, dtype=np.uint64)[:, None] * np.uint64(dim) + np.arange(dim, dtype=np.uint64))
    with np.errstate(over="ignore"):
        x = keys * _GOLDEN + np.uint64(seed) * _MIX2
        x = (x ^ (x >> np.uint64(30))) * _MIX1
        x = (x ^ (x >> np.uint64(27))) * _MIX2
        x = x ^ (x >> np.uint64(31))
    return ((x >> np.uint64(40)).astype(np.float32) * np.float32(1.0 / (1 << 24)))


_STEP: contextvars.ContextVar[tuple[str, dict[str, int]] | None] = contextvars.ContextVar(
    "paddle_edo_step_randomness", default=None)


@contextlib.contextmanager
def step_randomness(step_key: object) -> Iterator[None]:
    """Inside, ``rounding_seed(table)`` is a function of ``step_key`` (its text), the table and how many
    seeds that table took before inside: not of what other tables drew, so that a rank holding some of a
    model's tables rounds them as one process holding all of them does (training steps and checkpoints run
    inside)."""
    token = _STEP.set((str(step_key), {}))
    try:
        yield
    finally:
        _STEP.reset(token)


def rounding_seed(table: str) -> int:
    """The key of rounding noise for ``table`` (a name the same in every process of a job): inside
    ``step_randomness``, a hash of the step's key, the table and its count of earlier calls in the step;
    outside, one draw from Paddle's generator (``paddle.seed`` decides it)."""
    step = _STEP.get()
    if step is None:
        return int(paddle.randint(0, 2 ** 31 - 1, [1]).item())
    key, calls = step
    count = calls.get(table, 0)
    calls[table] = count + 1
    return zlib.crc32(f"{key}:{table}:{count}".encode()) & 0x7FFFFFFF


def rounding_noise(rows: paddle.Tensor, dim: int, seed: int, rows_to_global=None) -> paddle.Tensor:
    """Noise [len(rows), dim] for re-encoding table rows ``rows`` (local ids; ``rows_to_global`` maps them to
    the table's global ids), keyed by ``seed`` (rounding_seed's): the native row write draws the same."""
    local = rows.numpy().astype(np.int64)
    return paddle.to_tensor(keyed_uniform(seed, rows_to_global(local) if rows_to_global else local, dim))


def keyed_normal(seed: int, rows: np.ndarray, dim: int, std: float) -> np.ndarray:
    """float32 [len(rows), dim] draws of N(0, std^2): Box-Muller in double precision, each pair of columns
    (d, d + 1) the cosine and sine of one pair of keyed uniforms, those of column d (by the native kernel
    where it can be had, on every processor: numpy's values but where a double's last bit rounds differently
    in its log1p, cos or sin)."""
    native = _native_draws("edo_keyed_normal", seed, rows, dim, float(std))
    return native if native is not None else _numpy_keyed_normal(seed, rows, dim, std)


def _numpy_keyed_normal(seed: int, rows: np.ndarray, dim: int, std: float) -> np.ndarray:
    u1 = _numpy_keyed_uniform(seed, rows, dim)[:, 0::2].astype(np.float64)
    u2 = _numpy_keyed_uniform(seed ^ 0x5DEECE66D, rows, dim)[:, 0::2].astype(np.float64)
    radius, angle = np.sqrt(-2.0 * np.log1p(-u1)), 2.0 * np.pi * u2  # 1 - u1 in (0, 1]
    out = np.empty([len(rows), dim], dtype=np.float32)
    out[:, 0::2] = radius * np.cos(angle) * std
    out[:, 1::2] = (radius * np.sin(angle) * std)[:, :dim // 2]
    return out


def _native_draws(name: str, seed: int, rows: np.ndarray, dim: int, *extra: float) -> np.ndarray | None:
    """float32 [len(rows), dim] from the kernels' C function ``name`` (keyed_random.cc), or None without it."""
    native = c_function(name)
    if native is None:
        return None
    rows = np.ascontiguousarray(rows, dtype=np.int64)
    out = np.empty([len(rows), dim], dtype=np.float32)
    native(seed, address(rows), len(rows), dim, *extra, address(out))
    return out
