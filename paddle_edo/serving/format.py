"""The files an exported table is kept in, read with numpy alone: ``.npy`` for fp32 rows, ``.bin`` for
packed rows (a JSON header, then the codes and the fp16 row parameters, each section 64-byte aligned),
and ``tables.json``, the manifest naming every table, its kind, shape, values file and checksum."""
from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DataError
from ..quant.formats import FORMATS, QuantFormat

MAGIC = b"EDOTABLE"
VERSION = 1
MANIFEST = "tables.json"
ALIGN = 64


def _aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


def write_packed(path: str | Path, codes: np.ndarray, params: np.ndarray | None, header: dict[str, Any]) -> None:
    """A packed table's codes [rows, bytes] (int8, or uint16 holding fp16/bf16 bits) and fp16 row
    parameters [rows, P] in one file, written to a temporary name and renamed."""
    path = Path(path)
    header = {**header, "version": VERSION, "codes_dtype": codes.dtype.str, "codes_shape": list(codes.shape),
              "params_shape": list(params.shape) if params is not None else None}
    room = _aligned(len(MAGIC) + 8 + len(json.dumps(header).encode("utf-8")) + 64)  # 64: room for the offsets
    codes_at, params_at = room, _aligned(room + codes.nbytes)
    header_bytes = json.dumps({**header, "codes_at": codes_at, "params_at": params_at}).encode("utf-8")
    header_bytes += b" " * (codes_at - len(MAGIC) - 8 - len(header_bytes))
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "wb") as f:
        f.write(MAGIC + struct.pack("<Q", len(header_bytes)) + header_bytes)
        f.write(np.ascontiguousarray(codes).tobytes())
        if params is not None:
            f.write(b"\0" * (params_at - codes_at - codes.nbytes))
            f.write(np.ascontiguousarray(params, dtype=np.float16).tobytes())
    os.replace(temporary, path)


def open_packed(path: str | Path) -> tuple[dict[str, Any], np.ndarray, np.ndarray | None]:
    """(header, codes, params) of a ``.bin``, memory-mapped; a truncated or foreign file is refused."""
    path = Path(path)
    size = path.stat().st_size
    with open(path, "rb") as f:
        start = f.read(len(MAGIC) + 8)
        if len(start) < len(MAGIC) + 8 or start[:len(MAGIC)] != MAGIC:
            raise DataError(f"{path} is not a paddle_edo packed table (no {MAGIC.decode()} header)")
        (length,) = struct.unpack("<Q", start[len(MAGIC):])
        try:
            header = json.loads(f.read(length).decode("utf-8"))
        except ValueError:
            raise DataError(f"{path}: the packed table's header is damaged") from None
    codes_shape, params_shape = header["codes_shape"], header["params_shape"]
    if params_shape:
        end = header["params_at"] + int(np.prod(params_shape)) * 2
    else:
        end = header["codes_at"] + int(np.prod(codes_shape)) * np.dtype(header["codes_dtype"]).itemsize
    if size < end:
        raise DataError(f"{path} is truncated: {size:,} bytes where the header says {end:,}")
    codes = np.memmap(path, dtype=np.dtype(header["codes_dtype"]), mode="r", offset=header["codes_at"],
                      shape=tuple(codes_shape))
    params = None if not params_shape else np.memmap(path, dtype=np.float16, mode="r", offset=header["params_at"],
                                                      shape=tuple(params_shape))
    return header, codes, params


def decode_rows(codes: np.ndarray, params: np.ndarray | None, storage_format: str, dim: int) -> np.ndarray:
    """Gathered codes [n, bytes] and fp16 parameters [n, P] -> fp32 rows [n, dim], with the arithmetic of
    paddle_edo.quant.codecs.decode (and of the fused kernels)."""
    fmt: QuantFormat = FORMATS[storage_format]
    if fmt.is_float:
        bits = codes.astype(np.uint32)
        if fmt.float_dtype == "float16":
            return codes.view(np.float16).astype(np.float32)
        return (bits << np.uint32(16)).view(np.float32)  # bf16: the high half of an fp32
    params = params.astype(np.float32)
    scale = params[:, 0:1]
    if fmt.values_per_byte == 1:
        return codes.astype(np.float32) * scale + (params[:, 1:2] + np.float32(128.0) * scale)
    values = fmt.byte_table()[codes.astype(np.int32) + 128].reshape(len(codes), -1)[:, :dim]
    if fmt.symmetric:
        return values * scale
    return values * scale + params[:, 1:2]


def hashed_buckets(ids: np.ndarray, coefficients: np.ndarray, num_buckets: int) -> np.ndarray:
    """[n, num_hashes] rows of a hash table's shared table: the high 32 bits of a x + b modulo 2^64, modulo
    num_buckets, as HashEmbedding.bucket_ids computes them (int64 arithmetic wrapping alike)."""
    x = ids.astype(np.int64)[:, None]
    with np.errstate(over="ignore"):
        mixed = x * coefficients[:, 0] + coefficients[:, 1]
    return np.remainder(np.floor_divide(mixed, np.int64(1) << np.int64(32)), num_buckets)


def read_manifest(folder: str | Path) -> dict[str, Any]:
    path = Path(folder) / MANIFEST
    if not path.is_file():
        raise DataError(f"{folder} holds no exported tables ({MANIFEST} is missing): "
                        f"tools/export_tables.py writes them")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        raise DataError(f"{path} is damaged (not JSON)") from None


def write_manifest(folder: str | Path, manifest: dict[str, Any]) -> None:
    path = Path(folder) / MANIFEST
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(manifest, indent=1, ensure_ascii=False), encoding="utf-8")
    os.replace(temporary, path)
