"""Compaction's commit on a local warehouse: the rewritten records as one new file and the old files
removed, in one log entry written by :class:`~.fast_append.LocalAppender`.

Why not delta-rs here: beside a broker committing locally (~1 ms a commit, hundreds a second), a delta-rs
predicate overwrite that takes tens of milliseconds loses its version race again and again and never
lands (measured: one compaction in 3 s of 650 commits/s). A link at the next version takes ~0.1 ms, so
the rewrite wins within a few tries. The check delta-rs's overwrite gave is kept: if a winner removed any
of the files read (another compaction, retention, a Spark job), this rewrite is dropped; appends are no
conflict (their offsets are above every offset rewritten).

The files a rewrite removes get a fresh modification time before its commit: the topic's tombstones are
kept only briefly (:data:`~.maintenance.TOMBSTONE_RETENTION_S`, or every checkpoint
would carry hundreds of thousands of them), so VACUUM (full: by listing) tells a file removed a minute ago
from one removed hours ago by its modification time, and keeps it for its whole retention after removal.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time

import pyarrow as pa

from topiclake.platform.log.fast_append import (
    LocalAppender,
    LostRace,
    added_bytes,
    commit_info,
    remove_action,
)
from topiclake.platform.log.file_index import DataFile

logger = logging.getLogger("topiclake.platform.log.maintenance")

MAX_RACES = 200


def commit_rewrite(uri: str, version: int, inside: list[DataFile], data: pa.Table) -> bool:
    """Replace the files ``inside`` (all of one partition and segment, read at table ``version``) by
    ``data``, their records sorted by offset; False if another writer removed one of them first."""
    return commit_rewrites(uri, version, [(inside, data)])


def commit_rewrites(uri: str, version: int, rewrites: list[tuple[list[DataFile], pa.Table]]) -> bool:
    """Several rewrites in one log entry: for each, the files ``inside`` (of one partition and segment,
    read at table ``version``; no file in two rewrites) replaced by ``data``, their records sorted by
    offset, as one new file. All or nothing: False if another writer removed one of the files first.

    One entry a maintenance round rather than one a (partition, segment): each entry is a version race
    against the appends and a version every reader replays.
    """
    appender = LocalAppender(uri, version)
    adds: list[dict[str, dict[str, object]]] = []
    removes = []
    for inside, data in rewrites:
        adds += appender.write_files(data, data_change=False)
        removes += [remove_action(f.path, f.partition, f.segment, f.size_bytes) for f in inside]
    read = {f.path for inside, _data in rewrites for f in inside}
    metrics = {
        "numRemovedFiles": str(len(removes)),
        "numAddedFiles": str(len(adds)),
        "numRemovedBytes": str(sum(f.size_bytes for inside, _data in rewrites for f in inside)),
        "numAddedBytes": str(added_bytes(adds)),
    }
    info = commit_info(metrics, {"topiclake.operation": "compaction"}, compaction=True)
    now = time.time()
    for path in read:  # vacuum keeps them its retention from now on (module docs)
        with contextlib.suppress(OSError):
            os.utime(os.path.join(uri, path), (now, now))
    for _ in range(MAX_RACES):
        try:
            appender.commit([info, *removes, *adds])
            return True
        except LostRace as race:
            if race.winners.changed_table or race.winners.removed & read:
                break
    for add in adds:  # never referenced: remove now rather than wait for vacuum
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(uri, str(add["add"]["path"])))
    return False
