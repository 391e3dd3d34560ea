"""The rows of a classic Delta checkpoint as the object-storage state writes them, and the tombstones it
keeps for them in Arrow form.

A topic table on object storage keeps the ``remove`` actions of compacted files for
``delta.deletedFileRetentionDuration`` (vacuum's window plus two vacuum intervals, over an hour), and a
busy topic removes tens of files a second: the sustained benchmark on S3 compacted ~75 a second in its
first minute, tens of thousands in ten minutes, ~300,000 an hour at that rate. Kept as one Python dict
each and converted row by row into every checkpoint (one a second), they cost more CPU every minute
(records/s fell from 588 to 173 over the 10-minute run) and ~1 KB of memory each. :class:`Tombstones`
keeps those read from or written to a checkpoint as one Arrow column, adds the few new since then, and
drops expired ones with one vectorised filter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

_MAP = pa.map_(pa.string(), pa.string())
_DV = pa.struct(
    [
        pa.field("storageType", pa.string(), False),
        pa.field("pathOrInlineDv", pa.string(), False),
        pa.field("offset", pa.int32()),
        pa.field("sizeInBytes", pa.int32(), False),
        pa.field("cardinality", pa.int64(), False),
    ]
)
_FORMAT = pa.struct([pa.field("provider", pa.string(), False), pa.field("options", _MAP, False)])
_STRINGS = pa.list_(pa.field("element", pa.string(), False))
#: The columns of a checkpoint as deltalake 1.6.6 writes them (readers find actions by column name).
CHECKPOINT_SCHEMA = pa.schema(
    [
        pa.field(
            "add",
            pa.struct(
                [
                    pa.field("path", pa.string(), False),
                    pa.field("partitionValues", _MAP, False),
                    pa.field("size", pa.int64(), False),
                    pa.field("modificationTime", pa.int64(), False),
                    pa.field("dataChange", pa.bool_(), False),
                    pa.field("stats", pa.string()),
                    pa.field("tags", _MAP),
                    pa.field("deletionVector", _DV),
                    pa.field("baseRowId", pa.int64()),
                    pa.field("defaultRowCommitVersion", pa.int64()),
                    pa.field("clusteringProvider", pa.string()),
                ]
            ),
        ),
        pa.field(
            "remove",
            pa.struct(
                [
                    pa.field("path", pa.string(), False),
                    pa.field("deletionTimestamp", pa.int64()),
                    pa.field("dataChange", pa.bool_(), False),
                    pa.field("extendedFileMetadata", pa.bool_()),
                    pa.field("partitionValues", _MAP),
                    pa.field("size", pa.int64()),
                    pa.field("stats", pa.string()),
                    pa.field("tags", _MAP),
                    pa.field("deletionVector", _DV),
                    pa.field("baseRowId", pa.int64()),
                    pa.field("defaultRowCommitVersion", pa.int64()),
                ]
            ),
        ),
        pa.field(
            "metaData",
            pa.struct(
                [
                    pa.field("id", pa.string(), False),
                    pa.field("name", pa.string()),
                    pa.field("description", pa.string()),
                    pa.field(
                        "format",
                        pa.struct(
                            [pa.field("provider", pa.string(), False), pa.field("options", _MAP, False)]
                        ),
                        False,
                    ),
                    pa.field("schemaString", pa.string(), False),
                    pa.field("partitionColumns", _STRINGS, False),
                    pa.field("createdTime", pa.int64()),
                    pa.field("configuration", _MAP, False),
                ]
            ),
        ),
        pa.field(
            "protocol",
            pa.struct(
                [
                    pa.field("minReaderVersion", pa.int32(), False),
                    pa.field("minWriterVersion", pa.int32(), False),
                    pa.field("readerFeatures", _STRINGS),
                    pa.field("writerFeatures", _STRINGS),
                ]
            ),
        ),
        pa.field(
            "txn",
            pa.struct(
                [
                    pa.field("appId", pa.string(), False),
                    pa.field("version", pa.int64(), False),
                    pa.field("lastUpdated", pa.int64()),
                ]
            ),
        ),
    ]
)


REMOVE_TYPE: pa.StructType = CHECKPOINT_SCHEMA.field("remove").type


class Tombstones:
    """The ``remove`` actions a table's state keeps: the checkpointed ones as an Arrow column, the newer
    ones as the JSON actions they came in."""

    def __init__(self) -> None:
        self._column: pa.ChunkedArray = pa.chunked_array([], type=REMOVE_TYPE)
        self._new: dict[str, Mapping[str, Any]] = {}

    def __len__(self) -> int:
        return len(self._column) + len(self._new)

    def add(self, remove: Mapping[str, Any]) -> None:
        """A ``remove`` action read from a log entry."""
        self._new[remove["path"]] = remove

    def discard(self, path: str) -> None:
        """An ``add`` of ``path`` after its removal: no tombstone (the column is filtered when written)."""
        self._new.pop(path, None)

    def load(self, column: pa.ChunkedArray | pa.Array) -> None:
        """The non-null ``remove`` values of a checkpoint's column (any writer's struct layout)."""
        if not isinstance(column, pa.ChunkedArray):
            column = pa.chunked_array([column])
        column = column.filter(pc.is_valid(column))
        if column.type != REMOVE_TYPE:  # another writer's fields or order: through JSON, once
            column = pa.chunked_array(
                [
                    pa.array(
                        [fit(plain(v, column.type), REMOVE_TYPE) for v in column.to_pylist()], REMOVE_TYPE
                    )
                ],
                type=REMOVE_TYPE,
            )
        self._column = pa.chunked_array(self._column.chunks + column.chunks, type=REMOVE_TYPE)

    def paths(self) -> set[str]:
        """Every tombstone's path (for tests and checks; builds Python strings)."""
        return set(pc.struct_field(self._column, "path").to_pylist()) | set(self._new)

    def any_between(self, after_ms: int, upto_ms: int) -> bool:
        """Whether a tombstone's ``deletionTimestamp`` lies in (``after_ms``, ``upto_ms``]."""
        if any(after_ms < int(r.get("deletionTimestamp") or 0) <= upto_ms for r in self._new.values()):
            return True
        if not len(self._column):
            return False
        stamps = pc.fill_null(pc.struct_field(self._column, "deletionTimestamp"), 0)
        return bool(pc.any(pc.and_(pc.greater(stamps, after_ms), pc.less_equal(stamps, upto_ms))).as_py())

    def column(self, expired_ms: float, live: set[str]) -> pa.ChunkedArray:
        """The tombstones to checkpoint: those deleted after ``expired_ms`` whose path is not ``live``
        again; they become the kept column (the new ones folded in)."""
        new = [fit(r, REMOVE_TYPE) for r in self._new.values()]
        column = pa.chunked_array([*self._column.chunks, pa.array(new, REMOVE_TYPE)], type=REMOVE_TYPE)
        if len(column):
            stamps = pc.fill_null(pc.struct_field(column, "deletionTimestamp"), 0)
            keep = pc.greater(stamps, int(expired_ms))
            if live:
                paths = pc.struct_field(column, "path")
                keep = pc.and_(
                    keep, pc.invert(pc.is_in(paths, value_set=pa.array(sorted(live), pa.string())))
                )
            column = column.filter(keep)
        self._column = (
            pa.chunked_array([column.combine_chunks()], type=REMOVE_TYPE) if len(column) else column
        )
        self._new = {}
        return self._column


def fit(value: Any, typ: pa.DataType) -> Any:
    """A JSON action's value in the form pyarrow takes for ``typ`` (maps as pairs; absent nulls)."""
    if value is None:
        return None
    if pa.types.is_map(typ):
        return list(value.items()) if isinstance(value, Mapping) else value
    if pa.types.is_struct(typ):
        return {f.name: fit(value.get(f.name), f.type) for f in typ} | _required(value, typ)
    return value


def _required(value: Mapping[str, Any], typ: pa.StructType) -> dict[str, Any]:
    """Non-null map fields absent from a JSON action (``format.options``, ``configuration``): empty."""
    return {
        f.name: [] for f in typ if not f.nullable and pa.types.is_map(f.type) and value.get(f.name) is None
    }


def plain(value: Any, typ: pa.DataType) -> Any:
    """A checkpoint row's value as the JSON action it stands for (maps as dicts, nulls left out)."""
    if value is None:
        return None
    if pa.types.is_map(typ):
        return dict(value)
    if pa.types.is_struct(typ):
        return {f.name: plain(value[f.name], f.type) for f in typ if value.get(f.name) is not None}
    return value
