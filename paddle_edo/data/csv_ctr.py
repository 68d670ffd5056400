"""A user's own CTR data as CSV: a header, a 0/1 label column and integer id columns."""
from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from .ctr import CTRTable, DataError, FieldSpec


def load_csv(path: str | Path, label: str, fields: dict[str, int], separator: str = "|") -> CTRTable:
    """Read ids as given (no re-indexing); a cell may hold several ids joined by ``separator``.

    Every id must lie in [0, vocab_size) of its field; 0 is padding for multi-valued fields.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(f"data file {path} does not exist")
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.reader(f)
        header = next(reader, None)
        if header is None:
            raise DataError(f"{path}: the file is empty; expected a header row")
        missing = [c for c in [label, *fields] if c not in header]
        if missing:
            raise DataError(f"{path}: no column {missing[0]!r} in the header ({', '.join(header)})")
        position = {c: header.index(c) for c in [label, *fields]}
        labels, cells = [], {name: [] for name in fields}
        for line, row in enumerate(reader, start=2):
            if not row:
                continue
            value = row[position[label]].strip()
            if value not in ("0", "1", "0.0", "1.0"):
                raise DataError(f"{path}: line {line}, column {label!r}: label {value!r} must be 0 or 1")
            labels.append(float(value))
            for name, size in fields.items():
                text = row[position[name]]
                try:
                    ids = [int(t) for t in text.split(separator)]
                except ValueError:
                    raise DataError(f"{path}: line {line}, field {name!r}: {text!r} is not an integer id") from None
                bad = [i for i in ids if not 0 <= i < size]
                if bad:
                    raise DataError(f"{path}: line {line}, field {name!r}: id {bad[0]} is out of range [0, {size})")
                cells[name].append(ids)
    specs, columns = [], {}
    for name, size in fields.items():
        max_len = max((len(c) for c in cells[name]), default=1)
        specs.append(FieldSpec(name, size, max_len))
        if max_len == 1:
            columns[name] = np.array([c[0] for c in cells[name]], dtype=np.int64)
        else:
            columns[name] = np.array([c + [0] * (max_len - len(c)) for c in cells[name]], dtype=np.int64)
    return CTRTable(specs, columns, np.array(labels, dtype=np.float32))


def write_csv(table: CTRTable, path: str | Path, label: str = "label", separator: str = "|") -> None:
    """Write a table in the format ``load_csv`` reads (used to export synthetic data)."""
    names = [f.name for f in table.fields]
    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f)
        writer.writerow([label, *names])
        for n in range(len(table)):
            row = [str(int(table.labels[n]))]
            for field in table.fields:
                value = table.ids[field.name][n]
                row.append(separator.join(str(int(v)) for v in value[value != 0]) if field.multi_valued
                           else str(int(value)))
            writer.writerow(row)
