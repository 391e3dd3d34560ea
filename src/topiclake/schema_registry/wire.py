"""Confluent's wire format: magic byte 0, the schema id as a 4-byte big-endian integer, the payload.

(Protobuf payloads also carry message indexes after the id; see :func:`decode_wire`.)
"""

from __future__ import annotations

import struct
from typing import Final

from topiclake.errors import RecordSchemaMismatch

__all__ = ["MAGIC", "decode_wire", "encode_wire", "schema_id_of"]

MAGIC: Final = 0
_HEADER = struct.Struct(">bI")


def encode_wire(schema_id: int, payload: bytes) -> bytes:
    """Frame a serialized record with its schema id."""
    return _HEADER.pack(MAGIC, schema_id) + payload


def schema_id_of(data: bytes | None) -> int | None:
    """The schema id of a framed record, or None when ``data`` is not in the wire format."""
    if data is None or len(data) < _HEADER.size or data[0] != MAGIC:
        return None
    return int(_HEADER.unpack_from(data)[1])


def decode_wire(data: bytes) -> tuple[int, bytes]:
    """Split a framed record into its schema id and payload.

    Raises:
        RecordSchemaMismatch: the bytes are not in the wire format.
    """
    sid = schema_id_of(data)
    if sid is None:
        raise RecordSchemaMismatch(
            "record is not in the schema registry wire format (magic byte 0, 4-byte id)"
        )
    return sid, data[_HEADER.size :]
