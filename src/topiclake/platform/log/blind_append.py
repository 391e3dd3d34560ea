"""A blind append of one Parquet file to an unpartitioned Delta table, on a local warehouse or on S3.

The topic tables' local path (:mod:`.fast_append`) made generic for the small ``_system`` tables that
only ever grow by appends (``_system/transactions``): pyarrow writes the file with the Delta statistics
delta-rs writes for the scalar columns, and :class:`~.fast_append.LocalAppender` links the log entry
(``commitInfo`` and ``add``) at the next free version (put-if-absent; a blind append never conflicts, so
on a lost race it moves on to the next version). ~1 ms a commit where delta-rs's ``write_deltalake``
costs ~30 ms under load. Readers, ``update``, checkpoints and vacuum stay delta-rs's; every
``CHECKPOINT_INTERVAL`` versions (delta-rs's default ``delta.checkpointInterval``) the writer asks
delta-rs for a checkpoint, as delta-rs's own post-commit hook would, so a reader never replays more than
that many entries.

On S3 the same entry goes through the topic tables' object path (:class:`~.object_append.ObjectAppender`):
the file is one PUT, the entry one conditional PUT (``If-None-Match: *``) at the version the writer expects,
tagged with a ``topiclake.commit`` id, so a PUT whose answer was lost is retried and recognised as landed
instead of committed twice.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from topiclake.platform.log.fast_append import ENGINE, LocalAppender, LostRace, _column_stats
from topiclake.platform.log.object_append import ObjectAppender
from topiclake.platform.log.spare_files import write_new

logger = logging.getLogger(__name__)

#: Versions between two checkpoints (delta-rs's and Spark's default ``delta.checkpointInterval``).
CHECKPOINT_INTERVAL = 100
#: Lost races in a row before giving up (another writer committing hundreds of versions meanwhile).
MAX_RACES = 1000
#: Attempts of one log entry's conditional PUT whose outcome is unknown (the client's deadline passed).
OBJECT_ATTEMPTS = 3


def _stats(data: pa.Table) -> dict[str, object]:
    """Delta file statistics as delta-rs writes them: row count, null counts, min/max of scalar columns
    (none for binary columns, nor for strings longer than Delta's 32-character prefix)."""
    mins: dict[str, object] = {}
    maxs: dict[str, object] = {}
    nulls: dict[str, int] = {}
    for field in data.schema:
        if pa.types.is_binary(field.type) or pa.types.is_large_binary(field.type):
            nulls[field.name] = data[field.name].null_count
            continue
        _column_stats(field.name, data[field.name], mins, maxs, nulls)
    return {"numRecords": data.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls}


def append_file(
    appender: LocalAppender | ObjectAppender,
    data: pa.Table,
    refresh: Callable[[], int],
    checkpoint: Callable[[int], None] | None = None,
) -> int:
    """Append ``data`` (the table's schema; the table unpartitioned) as one new Parquet file in one log
    entry and return the version committed.

    Args:
        appender: The table's appender (its ``version`` is the newest this writer knows).
        data: The rows.
        refresh: The table's current version, read by delta-rs (after a checkpoint newer than the
            appender's version: entries past it may have been cleaned up).
        checkpoint: Called with the version after a commit at a multiple of :data:`CHECKPOINT_INTERVAL`
            (it may write the checkpoint later, beside the next commits).

    Raises:
        OSError: The file or the entry could not be written (locally the entry is then not in the table;
            on S3 it may have landed, as one ``topiclake.commit``: rows the caller writes again after such
            an error must be ones a duplicate cannot harm).
        RuntimeError: Other writers took :data:`MAX_RACES` versions in a row.
    """
    sink = pa.BufferOutputStream()
    pq.write_table(data, sink, compression="snappy")
    encoded = sink.getvalue()
    if isinstance(appender, ObjectAppender):
        name = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
        appender.client.put(f"{appender.table_key}/{name}", encoded.to_pybytes())
    else:
        name = os.path.basename(
            write_new(appender.root, "part-00000-", "-c000.snappy.parquet", memoryview(encoded))
        )
    now = int(time.time() * 1000)
    commit_id = uuid.uuid4().hex
    add = {
        "path": name,
        "partitionValues": {},
        "size": encoded.size,
        "modificationTime": now,
        "dataChange": True,
        "stats": orjson.dumps(_stats(data)).decode(),
    }
    info = {
        "timestamp": now,
        "operation": "WRITE",
        "operationParameters": {"mode": "Append"},
        "isBlindAppend": True,
        "operationMetrics": {
            "numFiles": "1",
            "numOutputRows": str(data.num_rows),
            "numOutputBytes": str(encoded.size),
        },
        "engineInfo": ENGINE,
        "clientVersion": ENGINE,
        "topiclake.commit": commit_id,
    }
    actions = [{"commitInfo": info}, {"add": add}]
    for _ in range(MAX_RACES):
        if appender.stale():
            appender.version = refresh()
        try:
            if isinstance(appender, ObjectAppender):
                version = _commit_object(appender, actions, commit_id)
            else:
                version = appender.commit(actions)
        except LostRace:
            continue  # blind: whatever the winners wrote, the next version takes this file as well
        if checkpoint is not None and version % CHECKPOINT_INTERVAL == 0:
            checkpoint(version)
        return version
    where = appender.table_key if isinstance(appender, ObjectAppender) else appender.root
    raise RuntimeError(f"{MAX_RACES} versions in a row taken by other writers of {where}")


def _commit_object(appender: ObjectAppender, actions: Sequence[Mapping[str, object]], commit_id: str) -> int:
    """The entry's conditional PUT, tried again while its outcome is unknown (the same ``commit_id``: an
    attempt that landed is found as this commit's own, not written twice).

    Raises:
        LostRace: Another writer has the version.
        OSError: Every attempt's outcome stayed unknown.
    """
    for attempt in range(OBJECT_ATTEMPTS):
        try:
            return appender.commit(actions, commit_id)
        except OSError as exc:
            if attempt == OBJECT_ATTEMPTS - 1:
                raise
            logger.warning("%s: commit %s unknown (%s); trying again", appender.table_key, commit_id, exc)
    raise AssertionError("unreachable")
