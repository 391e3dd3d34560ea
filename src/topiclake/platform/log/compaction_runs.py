"""Which files a compaction round merges: tiers of a segment's small files, as offset ranges that share no
file (the policy :class:`~.maintenance.TableMaintainer` applies; split from :mod:`.maintenance`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from topiclake.platform.log.file_index import DataFile, read_files


@dataclass(frozen=True)
class Run:
    """An offset range of one (partition, segment) to rewrite, and every file it overlaps."""

    partition: int
    segment: int
    lo: int
    hi: int
    inside: list[DataFile]


def disjoint_runs(segment_files: list[DataFile], picked: list[list[DataFile]]) -> list[Run]:
    """The picked runs of one segment as offset ranges that share no file: a range grows until every
    file it overlaps lies within it (a file is never split), and ranges that then meet are joined."""
    ranges = sorted((min(f.min_offset for f in r), max(f.max_offset for f in r)) for r in picked if r)
    merged: list[tuple[int, int, list[DataFile]]] = []
    for lo, hi in ranges:
        while True:
            inside = [f for f in segment_files if f.max_offset >= lo and f.min_offset <= hi]
            wider = (min([lo, *(f.min_offset for f in inside)]), max([hi, *(f.max_offset for f in inside)]))
            if wider == (lo, hi):
                break
            lo, hi = wider
        while merged and lo <= merged[-1][1]:  # closed ranges that meet: their union is closed too
            prev_lo, prev_hi, _ = merged.pop()
            lo, hi = min(lo, prev_lo), max(hi, prev_hi)
            inside = [f for f in segment_files if f.max_offset >= lo and f.min_offset <= hi]
        merged.append((lo, hi, inside))
    first = segment_files[0] if segment_files else None
    if first is None:
        return []
    return [Run(first.partition, first.segment, lo, hi, inside) for lo, hi, inside in merged]


def run_records(fs: Any, run: Run) -> pa.Table:
    """The records of ``run``, sorted by offset."""
    data = read_files(fs, run.inside, run.lo)
    return data.filter(pc.less_equal(data["offset"], run.hi))


def tier(records: int, base: int) -> int:
    tier = 0
    while records >= base:
        records //= base
        tier += 1
    return tier
