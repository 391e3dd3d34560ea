"""A transactional Produce sent on to the transaction coordinator's Kafka listener.

A client sends a partition's batches to the partition's leader; a transaction's batches are held by the
transactional id's coordinator, which in a cluster is often another broker. The leader forwards the
request there as a Kafka client would (Produce v9), marked by its client id so it is never forwarded twice.
"""

from __future__ import annotations

import asyncio
import io
import struct
from typing import Any, Final

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from topiclake.kafka.codec import build

#: The client id of a forwarded request.
FORWARDED_BY: Final = "topiclake-txn-forward"
_VERSION: Final = 9
_TIMEOUT_S: Final = 30.0


class ForwardFailed(Exception):
    """The coordinator could not be reached or did not answer."""


def _frame(body: dict[str, Any]) -> bytes:
    cls = load_request_schema(0, _VERSION)
    header_cls = cls.__header_schema__
    head = {
        "request_api_key": 0,
        "request_api_version": _VERSION,
        "correlation_id": 1,
        "client_id": FORWARDED_BY,
    }
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, build(header_cls, head))
    entity_writer(cls)(buf, build(cls, body))
    return struct.pack(">i", len(buf.getvalue())) + buf.getvalue()


async def forward_produce(host: str, port: int, body: dict[str, Any]) -> list[dict[str, Any]]:
    """Send a Produce request body to ``host:port``; its per-topic ``responses`` as dicts.

    Raises:
        ForwardFailed: Connection refused or closed, or no answer within 30 s.
    """
    try:
        async with asyncio.timeout(_TIMEOUT_S):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                writer.write(_frame(body))
                await writer.drain()
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                data = await reader.readexactly(size)
            finally:
                writer.close()
    except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
        raise ForwardFailed(f"transaction coordinator {host}:{port}: {exc}") from exc
    cls = load_response_schema(0, _VERSION)
    _head, n = entity_reader(cls.__header_schema__)(data, 0)
    answer: Any = entity_reader(cls)(data, n)[0]
    return [
        {
            "name": t.name,
            "partition_responses": [
                {
                    "index": int(p.index),
                    "error_code": int(p.error_code),
                    "error_message": p.error_message,
                    "base_offset": -1,
                    "log_append_time": -1,
                }
                for p in t.partition_responses
            ],
        }
        for t in answer.responses
    ]
