"""RecordBatch v2 <-> Arrow columns, through aiokafka's compiled record module (pinned adapter).

aiokafka's Cython ``DefaultRecordBatch`` checks the CRC32C, decompresses gzip, snappy, lz4 and zstd (via
cramjam) and decodes at well under a microsecond a record; kio's own batch reader cuts timestamps to whole
seconds and cannot read compressed batches. Nothing outside this module touches aiokafka.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import pyarrow as pa
from aiokafka.record.default_records import DefaultRecordBatch

from topiclake.kafka.batch_encoder import encode_table
from topiclake.platform.log.rows import Rows

_BATCH_HEAD = struct.Struct(">qiib")  # base offset, batch length, partition leader epoch, magic
_TRANSACTIONAL_BIT = 0x10
_CONTROL_BIT = 0x20


class CorruptBatch(Exception):
    """The records field is not a sequence of valid RecordBatch v2 (Kafka's CORRUPT_MESSAGE)."""


class UnsupportedMagic(Exception):
    """A legacy message set (magic 0 or 1): Kafka's UNSUPPORTED_FOR_MESSAGE_FORMAT."""


@dataclass(frozen=True)
class DecodedBatch:
    """One produced batch as input columns (``key``, ``value``, ``headers``, ``timestamp_ms``)."""

    table: pa.Table
    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool


def split_batches(data: bytes) -> list[bytes]:
    """Cut a records field into its batches (each ``12 + batch length`` bytes)."""
    out = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < _BATCH_HEAD.size:
            raise CorruptBatch(f"{len(data) - pos} trailing bytes are not a batch")
        _base, length, _epoch, magic = _BATCH_HEAD.unpack_from(data, pos)
        if magic != 2:
            raise UnsupportedMagic(f"message format magic {magic}: only RecordBatch v2 is accepted")
        end = pos + 12 + length
        if length < 49 or end > len(data):
            raise CorruptBatch(f"batch length {length} does not fit the {len(data) - pos} bytes left")
        out.append(data[pos:end])
        pos = end
    return out


def decode(data: bytes) -> list[DecodedBatch]:
    """Decode a Produce request's records field into Arrow input columns.

    Raises:
        CorruptBatch: Bad length or CRC, or undecodable records.
        UnsupportedMagic: A legacy message set.
    """
    return [
        DecodedBatch(b.rows.to_table(), b.producer_id, b.producer_epoch, b.base_sequence, b.transactional)
        for b in decode_rows(data)
    ]


@dataclass(frozen=True)
class DecodedRows:
    """One produced batch as lists (:class:`~topiclake.platform.log.rows.Rows`): what the hot path queues."""

    rows: Rows
    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool


def decode_rows(data: bytes) -> list[DecodedRows]:
    """Decode a Produce request's records field into lists, no Arrow work (see :func:`decode`)."""
    out = []
    for raw in split_batches(data):
        batch = DefaultRecordBatch(raw)
        if not batch.validate_crc():
            raise CorruptBatch("batch CRC32C does not match")
        try:
            recs = list(batch)  # aiokafka's compiled reader: decompressed, one object a record
        except Exception as exc:
            raise CorruptBatch(f"records do not decode: {exc}") from exc
        heads = [rec.headers for rec in recs]
        rows = Rows(
            [rec.key for rec in recs],
            [rec.value for rec in recs],
            [[{"key": k, "value": v} for k, v in h] if h else None for h in heads]
            if any(heads)
            else [None] * len(recs),
            [rec.timestamp for rec in recs],
        )
        out.append(
            DecodedRows(
                rows,
                batch.producer_id,
                batch.producer_epoch,
                batch.base_sequence,
                bool(batch.attributes & _TRANSACTIONAL_BIT),
            )
        )
    return out


def encode(rows: pa.Table, leader_epoch: int = 0) -> bytes:
    """RecordBatch v2 bytes (uncompressed) for topic-table rows ordered by offset.

    One batch per run of rows with the same timestamp type (and append time, for LogAppendTime); offsets
    keep their gaps (compaction). Column at a time: :mod:`topiclake.kafka.batch_encoder`.
    """
    return encode_table(rows, leader_epoch)
