"""Pretrained vectors from a user's word2vec file (text or binary) into a table, counting hits and misses."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import paddle

from ..errors import EdoFileNotFoundError, EdoValueError
from .vocab import Vocab


@dataclass(frozen=True)
class PretrainedReport:
    hits: int          # vocabulary tokens that got a vector from the file
    misses: int        # vocabulary tokens (other than [PAD]/[UNK]) the file lacks: they keep their values
    file_tokens: int   # vectors in the file

    @property
    def coverage(self) -> float:
        return self.hits / max(1, self.hits + self.misses)


def read_word2vec(path: str | Path, binary: bool | None = None) -> tuple[list[str], np.ndarray]:
    """Tokens and float32 vectors of a word2vec file: a ``count dim`` header, then ``token v1 .. vdim``
    lines (text) or a token, a space and dim little-endian float32 (binary; guessed from a .bin name)."""
    path = Path(path)
    if not path.is_file():
        raise EdoFileNotFoundError(f"read_word2vec: {path} does not exist")
    binary = path.suffix == ".bin" if binary is None else binary
    with open(path, "rb") as f:
        header = f.readline().decode("utf-8").split()
        if len(header) != 2 or not all(h.isdigit() for h in header):
            raise EdoValueError(f"{path}: line 1 must be '<count> <dim>', got {' '.join(header)!r}")
        count, dim = int(header[0]), int(header[1])
        tokens, vectors = [], np.empty((count, dim), dtype=np.float32)
        for i in range(count):
            if binary:
                token = _read_token(f, path, i + 2)
                raw = f.read(4 * dim)
                if len(raw) != 4 * dim:
                    raise EdoValueError(f"{path}: vector {i + 1} of {count} is cut short")
                vectors[i] = np.frombuffer(raw, dtype="<f4")
            else:
                line = f.readline().decode("utf-8").rstrip("\n").rstrip(" ").split(" ")
                if len(line) != dim + 1:
                    raise EdoValueError(f"{path}: line {i + 2} has {len(line) - 1} values, expected {dim}")
                token = line[0]
                vectors[i] = np.asarray(line[1:], dtype=np.float32)
            tokens.append(token)
    return tokens, vectors


def _read_token(f, path: Path, line: int) -> str:
    raw = bytearray()
    while True:
        byte = f.read(1)
        if not byte:
            raise EdoValueError(f"{path}: entry {line - 1} is cut short")
        if byte == b" ":
            return raw.decode("utf-8").lstrip("\n")
        raw += byte


def load_pretrained(weight: paddle.Tensor, vocab: Vocab, path: str | Path, binary: bool | None = None
                    ) -> PretrainedReport:
    """Copy the file's vectors into the rows of ``weight`` (a [len(vocab), dim] table) for the tokens
    both share; [PAD] and [UNK] are left alone."""
    tokens, vectors = read_word2vec(path, binary)
    rows, dim = weight.shape
    if rows != len(vocab) or vectors.shape[1] != dim:
        raise EdoValueError(f"load_pretrained: {path} has {vectors.shape[1]}-dim vectors and the vocabulary "
                            f"{len(vocab)} tokens; the table is [{rows}, {dim}]")
    ids = np.array([vocab.index.get(t, -1) for t in tokens], dtype=np.int64)
    found = ids > 1
    values = weight.numpy()
    values[ids[found]] = vectors[found]
    weight.set_value(values)
    hits = len(np.unique(ids[found]))
    return PretrainedReport(hits, len(vocab) - 2 - hits, len(tokens))
