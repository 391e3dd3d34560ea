"""A blind append of one Parquet file to an unpartitioned Delta table on a local warehouse.

The topic tables' local path (:mod:`.fast_append`) made generic for the small ``_system`` tables that
only ever grow by appends (``_system/transactions``): pyarrow writes the file with the Delta statistics
delta-rs writes for the scalar columns, and :class:`~.fast_append.LocalAppender` links the log entry
(``commitInfo`` and ``add``) at the next free version (put-if-absent; a blind append never conflicts, so
on a lost race it moves on to the next version). ~1 ms a commit where delta-rs's ``write_deltalake``
costs ~30 ms under load. Readers, ``update``, checkpoints and vacuum stay delta-rs's; every
``CHECKPOINT_INTERVAL`` versions (delta-rs's default ``delta.checkpointInterval``) the writer asks
delta-rs for a checkpoint, as delta-rs's own post-commit hook would, so a reader never replays more than
that many entries.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import orjson
import pyarrow as pa
import pyarrow.parquet as pq

from topiclake.platform.log.fast_append import ENGINE, LocalAppender, LostRace, _column_stats
from topiclake.platform.log.spare_files import write_new

#: Versions between two checkpoints (delta-rs's and Spark's default ``delta.checkpointInterval``).
CHECKPOINT_INTERVAL = 100
#: Lost races in a row before giving up (another writer committing hundreds of versions meanwhile).
MAX_RACES = 1000


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
    appender: LocalAppender,
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
        OSError: The file or the entry could not be written (the entry is then not in the table).
        RuntimeError: Other writers took :data:`MAX_RACES` versions in a row.
    """
    sink = pa.BufferOutputStream()
    pq.write_table(data, sink, compression="snappy")
    encoded = sink.getvalue()
    path = write_new(appender.root, "part-00000-", "-c000.snappy.parquet", memoryview(encoded))
    now = int(time.time() * 1000)
    add = {
        "path": os.path.basename(path),
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
    }
    actions = [{"commitInfo": info}, {"add": add}]
    for _ in range(MAX_RACES):
        if appender.stale():
            appender.version = refresh()
        try:
            version = appender.commit(actions)
        except LostRace:
            continue  # blind: whatever the winners wrote, the next version takes this file as well
        if checkpoint is not None and version % CHECKPOINT_INTERVAL == 0:
            checkpoint(version)
        return version
    raise RuntimeError(f"{MAX_RACES} versions in a row taken by other writers of {appender.root}")
