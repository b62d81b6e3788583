"""The free milli ranges of one shared GPU, kept exactly.

A GPU share holds one contiguous range ``[start, start + milli)`` of its GPU, and the commit
gives a share the tightest free range that holds it, lowest first among equals (docs/design.md,
"The GPU allocation guard"). Where shares come and go, a GPU's free milli is then several
ranges: what a share frees joins the free ranges it touches and no others, and a larger share
fits only in one range that is large enough.

``Ranges`` are one GPU's free ranges as (start, end) pairs, lowest first, none touching another.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from jobs.placement.model import WHOLE_GPU

Ranges = tuple[tuple[int, int], ...]

IDLE: Ranges = ((0, WHOLE_GPU),)


def of(free: Sequence[tuple[int, int]]) -> Ranges:
    """Ranges from free (start, milli) pairs in any order, joined where they touch."""
    out: list[tuple[int, int]] = []
    if len(free) == 1:  # the usual case: an idle GPU, or one range left
        ((start, milli),) = free
        return ((start, start + milli),) if milli > 0 else ()
    for start, milli in sorted(free):
        if milli <= 0:
            continue
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], start + milli))
        else:
            out.append((start, start + milli))
    return tuple(out)


def largest(free: Ranges) -> int:
    """The most milli one share can get."""
    if len(free) == 1:  # the usual case, kept cheap
        return free[0][1] - free[0][0]
    return max((end - start for start, end in free), default=0)


def total(free: Ranges) -> int:
    """All free milli, over every range."""
    return sum(end - start for start, end in free)


def tightest(free: Ranges, milli: int) -> int | None:
    """Where the commit puts a share of ``milli``: the start of the smallest range that holds
    it, the lowest of equal ones (None if none does)."""
    if len(free) == 1:
        return free[0][0] if free[0][1] - free[0][0] >= milli else None
    fits = [(end - start, start) for start, end in free if end - start >= milli]
    return min(fits)[1] if fits else None


def give(free: Ranges, start: int, milli: int) -> Ranges:
    """The ranges once ``[start, start + milli)`` is free too, joined with those it touches."""
    low, high = start, start + milli
    out = []
    for s, e in free:
        if e < low or s > high:
            out.append((s, e))
        else:
            low, high = min(low, s), max(high, e)
    out.append((low, high))
    out.sort()
    return tuple(out)


def take(free: Ranges, start: int, milli: int) -> Ranges:
    """The ranges once ``[start, start + milli)`` is held."""
    low, high = start, start + milli
    out = []
    for s, e in free:
        if e <= low or s >= high:
            out.append((s, e))
            continue
        if s < low:
            out.append((s, low))
        if e > high:
            out.append((high, e))
    return tuple(out)


def shares(free: Ranges, milli: int) -> int:
    """How many shares of ``milli`` the ranges hold side by side."""
    return sum((end - start) // milli for start, end in free)


def outside(start: int, milli: int, others: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The (start, milli) parts of ``[start, start + milli)`` that none of the (start, milli)
    ranges ``others`` covers."""
    parts: Ranges = ((start, start + milli),)
    for other_start, other_milli in others:
        parts = take(parts, other_start, other_milli)
    return [(s, e - s) for s, e in parts]
