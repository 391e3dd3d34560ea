"""Compaction's commit on S3: each run's records as one new file and the old files removed, in one log
entry per maintenance round, written by an :class:`~.object_append.ObjectAppender` as the flusher's
appends are (one conditional PUT), not by a delta-rs predicate overwrite per run.

Why: under 32 single-record producers on S3 (bench/sustained.py --store s3, 20 ms a request) a delta-rs
overwrite is ~10 sequential round trips per run and loses its version to the flusher's appends again and
again; files per partition grew past the policy's bound within 15 s (issue 25). Here a round costs the
new files' PUTs (in parallel) and one PUT of the log entry; the records come from the partitions' tail
caches when they hold them (:meth:`~._reads.LogReads.held_records`), so no small file is read back.

The entry is written while the topic's own commits are held (:meth:`~.topic_log.TopicLog.hold_commits`,
one round trip at most): the flusher's appender then knows the newest version exactly, so the entry
lands at the first try unless another writer (another broker's partitions, a Spark job) took it. It is
written by an appender of its own, at the flusher's version + 1: a version lost to another writer is
handled as on a local disk (:mod:`._local_compaction`): a winner that removed a file read, or changed the
table, drops the rewrite; appends are no conflict. The flusher's appender is moved past the entry only
when nothing came between, so every other writer's entry is still read by the flusher (its fencing).

Nothing the rewrite read may have been removed in between (the records would be there twice): the
versions from the file index's to the flusher's were its own appends or other writers' entries it read
on a 412, which its appender remembers (:meth:`~.object_append.ObjectAppender.removed_since`); when it
cannot tell, the rewrite starts at the index's version and reads every winner.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager

import pyarrow as pa

from topiclake.platform.log.fast_append import LostRace, Winners, added_bytes, commit_info, remove_action
from topiclake.platform.log.file_index import DataFile
from topiclake.platform.log.object_append import ObjectAppender

MAX_RACES = 200


def commit_object_rewrites(
    fast: ObjectAppender,
    hold: Callable[[], AbstractContextManager[None]],
    version: int,
    rewrites: list[tuple[list[DataFile], pa.Table]],
) -> bool:
    """Replace, for each rewrite, the files ``inside`` (of one partition and segment, read at table
    ``version``) by ``data``, sorted by offset, as one new file; all in one log entry. False if another
    writer removed one of the files first (the new files are then deleted: nothing references them).

    Raises:
        OSError: a PUT failed until the client's deadline (the entry may have landed: the flusher finds
            it as any other writer's).
    """
    adds = fast.write_tables([data for _inside, data in rewrites], data_change=False)
    removes = [
        remove_action(f.path, f.partition, f.segment, f.size_bytes) for inside, _ in rewrites for f in inside
    ]
    read = {f.path for inside, _data in rewrites for f in inside}
    metrics = {
        "numRemovedFiles": str(len(removes)),
        "numAddedFiles": str(len(adds)),
        "numRemovedBytes": str(sum(f.size_bytes for inside, _data in rewrites for f in inside)),
        "numAddedBytes": str(added_bytes(adds)),
    }
    commit_id = uuid.uuid4().hex
    custom = {"topiclake.operation": "compaction", "topiclake.commit": commit_id}
    actions: list[Mapping[str, object]] = [commit_info(metrics, custom, compaction=True), *removes, *adds]
    with hold():  # the flusher's commit in flight finishes first; none starts until the entry is written
        removed = fast.removed_since(version, read)
        if removed:
            _delete(fast, adds)
            return False
        # the versions between the index and the flusher's were its own appends or entries it read and
        # found harmless; when it cannot tell, start at the index's version and read every winner
        start = max(fast.version, version) if removed is not None else version
        writer = ObjectAppender(fast.client, fast.table_key, start, fast.fresh_s)
        for _ in range(MAX_RACES):
            try:
                landed = writer.commit(actions, commit_id)
            except LostRace as race:
                if race.winners.changed_table or race.winners.removed & read:
                    _delete(fast, adds)  # the entry did not land: nothing references them
                    return False
                continue
            for version in range(start + 1, landed + 1):  # the winners it read, and its own entry
                body = writer.take_entry(version)
                if body is not None:
                    fast.record(version, body)
            fast.moved_past(landed, Winners(versions=[landed], removed=read))  # if nothing came between
            return True
    _delete(fast, adds)
    return False


def _delete(fast: ObjectAppender, adds: list[dict[str, dict[str, object]]]) -> None:
    """Delete a dropped round's new files (unreferenced: no entry of ours landed with them)."""
    for add in adds:
        try:
            fast.client.delete(f"{fast.table_key}/{add['add']['path']}")
        except OSError:  # a full vacuum, by listing, removes what is left
            return
