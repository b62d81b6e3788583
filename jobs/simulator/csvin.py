"""The simulator's CSV inputs: a file that cannot be used is a ValueError naming the file and
the missing columns or the line that does not parse."""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def read_rows(
    path: str | Path, columns: Sequence[str | tuple[str, ...]], build: Callable[[dict], T]
) -> list[T]:
    """``build(row)`` for every row. ``columns`` must be in the header; a tuple among them
    means any one of its names."""
    with open(path, newline="", encoding="utf-8-sig") as f:  # a leading BOM is not a column
        reader = csv.DictReader(f)
        header = set(reader.fieldnames or ())
        missing = [
            " or ".join(c) if isinstance(c, tuple) else c
            for c in columns
            if not (set(c) & header if isinstance(c, tuple) else c in header)
        ]
        if missing:
            columns_word = "column" if len(missing) == 1 else "columns"
            raise ValueError(f"{path}: missing {columns_word} {', '.join(missing)}")
        out = []
        for row in reader:
            try:
                out.append(build(row))
            except (TypeError, ValueError) as error:
                raise ValueError(f"{path}, line {reader.line_num}: {error}") from None
        return out
