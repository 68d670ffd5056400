"""Data in the Criteo display-advertising format for tests and scale runs: tab-separated, no header,
a 0/1 label, 13 integer features I1-I13 and 26 categorical features C1-C26 as 8-hex-digit hashes,
empty cells for missing values; Zipf-distributed values with Criteo's per-field cardinalities and a
planted signal. A user with the real files points ``data.name: criteo`` at them instead."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pcsv

from .hashing import mix64
from .tabular import CRITEO_CATEGORICAL, CRITEO_NUMERIC

# Distinct values per categorical field in the Kaggle release (45.8M rows)
CRITEO_CARDINALITIES = (1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593, 3194, 27,
                        14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105, 142572)
# Share of empty cells per field, about as in the Kaggle release
CATEGORICAL_MISSING = (0.0, 0.0, 0.03, 0.03, 0.0, 0.12, 0.0, 0.0, 0.0, 0.0, 0.0, 0.03, 0.0, 0.0, 0.0, 0.03, 0.0,
                       0.0, 0.44, 0.44, 0.03, 0.0, 0.0, 0.03, 0.44, 0.44)
NUMERIC_MISSING = (0.45, 0.0, 0.21, 0.22, 0.03, 0.22, 0.04, 0.0, 0.04, 0.45, 0.04, 0.77, 0.22)
SIGNAL_FIELDS = (0, 1, 4, 5, 7, 9, 13, 16, 19, 22)  # fields whose values carry a planted weight
CHUNK_ROWS = 250_000
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def zipf_ranks(cardinality: int, alpha: float, uniform: np.ndarray) -> np.ndarray:
    """Ranks in [0, cardinality) with P(rank r) about proportional to (r + 1) ** -alpha: the inverse CDF of
    the continuous power law on [0.5, cardinality + 0.5), rounded, so any cardinality costs O(1) memory."""
    low, high = 0.5, cardinality + 0.5
    if abs(alpha - 1.0) < 1e-9:
        x = low * np.power(high / low, uniform)
    else:
        power = 1.0 - alpha
        x = (low ** power + uniform * (high ** power - low ** power)) ** (1.0 / power)
    return np.clip(np.floor(x - 0.5).astype(np.int64), 0, cardinality - 1)


def _unit(values: np.ndarray, salt: int) -> np.ndarray:
    """A deterministic uniform [0, 1) number per value."""
    return (mix64(values.astype(np.uint64) + np.uint64(salt * 0x9E3779B97F4A7C15 % 2**64)) >> np.uint64(11)
            ).astype(np.float64) * 2.0 ** -53


def _hex_strings(values: np.ndarray, missing: np.ndarray) -> pa.Array:
    """uint32 values as 8 lowercase hex digits, null where missing (built from buffers: no Python loop)."""
    n = len(values)
    shifts = np.arange(28, -4, -4, dtype=np.uint64)
    digits = _HEX[((values.astype(np.uint64)[:, None] >> shifts) & np.uint64(15)).astype(np.int64)]
    offsets = np.arange(0, 8 * n + 1, 8, dtype=np.int32)
    validity = np.packbits(~missing, bitorder="little")
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(digits)),
                                       pa.py_buffer(validity), int(missing.sum()))


def criteo_chunk(rows: int, rng: np.random.Generator, seed: int, zipf_alpha: float) -> tuple[pa.Table, np.ndarray]:
    """One chunk of rows in Criteo's columns, and the planted logit of each row."""
    logit = np.zeros(rows)
    numeric = {}
    for i, name in enumerate(CRITEO_NUMERIC):
        counts = np.floor(np.expm1(rng.gamma(1.2 + 0.1 * i, 1.0, rows))).astype(np.int64)
        if i == 1:  # I2 takes small negative values too
            counts -= 2
        missing = rng.random(rows) < NUMERIC_MISSING[i]
        numeric[name] = pa.array(counts, mask=missing)
        if i in (0, 4, 6):
            logit += np.where(missing, 0.0, 0.25 * (np.log1p(np.maximum(counts, 0)) - 1.5))
    categorical = {}
    for k, (name, cardinality) in enumerate(zip(CRITEO_CATEGORICAL, CRITEO_CARDINALITIES)):
        ranks = zipf_ranks(cardinality, zipf_alpha, rng.random(rows))
        missing = rng.random(rows) < CATEGORICAL_MISSING[k]
        values = (mix64(ranks.astype(np.uint64) + np.uint64(seed * 1000 + k)) & np.uint64(0xFFFFFFFF))
        categorical[name] = _hex_strings(values, missing)
        if k in SIGNAL_FIELDS:
            logit += np.where(missing, 0.0, 1.2 * (_unit(ranks, seed * 100 + k) - 0.5) * np.sqrt(3.0))
    labels = (rng.random(rows) < 1.0 / (1.0 + np.exp(-(logit - 1.1)))).astype(np.int64)
    columns = {"label": pa.array(labels), **numeric, **categorical}
    return pa.table(columns), logit


def write_criteo_synthetic(out: str | Path, rows: int, files: int = 1, seed: int = 7, zipf_alpha: float = 1.05,
                           compress: bool = False) -> list[Path]:
    """Write ``rows`` rows in ``files`` day files (``day_0`` ...; ``.gz`` when compressed) into the folder
    ``out``, each written to a temporary name and renamed when complete. Returns the files."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    options = pcsv.WriteOptions(include_header=False, delimiter="\t", quoting_style="none")
    written = []
    per_file = [rows // files + (1 if f < rows % files else 0) for f in range(files)]
    for number, count in enumerate(per_file):
        path = out / (f"day_{number}" + (".gz" if compress else ""))
        temporary = path.with_name(path.name + ".tmp")
        sink = pa.CompressedOutputStream(str(temporary), "gzip") if compress else pa.OSFile(str(temporary), "wb")
        with sink:
            for start in range(0, count, CHUNK_ROWS):
                table, _ = criteo_chunk(min(CHUNK_ROWS, count - start), rng, seed, zipf_alpha)
                pcsv.write_csv(table, sink, write_options=options)
        os.replace(temporary, path)
        written.append(path)
    return written
