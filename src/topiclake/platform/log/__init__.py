"""A topic's log: the Delta table of one topic, its partitions' appends, group commit, reads and upkeep.

:class:`TopicLog` is the face (appends, the flusher, fetches, leadership); its parts are ``_append``,
``_commit``, ``_local`` (the local append path's commit, :mod:`.fast_append`) and ``_reads``. Reads go through
:mod:`.file_index`, :mod:`.tail_cache` and :mod:`.file_cache`; idempotent producers through
:mod:`.producer_state`; upkeep (checkpoints, log cleanup, compaction, vacuum) is :mod:`.maintenance`;
appends from outside a broker (Spark's sink, reprocessing) are :mod:`.topic_writer`.
"""

from topiclake.platform.log.file_index import DataFile, FileIndex, build_index
from topiclake.platform.log.maintenance import TableMaintainer
from topiclake.platform.log.maintenance_thread import Maintenance
from topiclake.platform.log.topic_log import (
    AppendHandle,
    TopicLog,
    commit_landed,
    epoch_app_id,
    partition_app_id,
)
from topiclake.platform.log.topic_writer import TopicWriter, WriteResult, writer_app_id

__all__ = [
    "AppendHandle",
    "DataFile",
    "FileIndex",
    "Maintenance",
    "TableMaintainer",
    "TopicLog",
    "TopicWriter",
    "WriteResult",
    "build_index",
    "commit_landed",
    "epoch_app_id",
    "partition_app_id",
    "writer_app_id",
]
