"""CTR tables written as CSV: a header, a 0/1 label column and integer id columns (read back through
``data.files`` with ``ids: given``)."""
from __future__ import annotations

import csv
from pathlib import Path

from .ctr import CTRTable


def write_csv(table: CTRTable, path: str | Path, label: str = "label", separator: str = "|") -> None:
    """Write a table as CSV, multi-valued cells joined by ``separator`` (synthetic data for the CLI)."""
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
