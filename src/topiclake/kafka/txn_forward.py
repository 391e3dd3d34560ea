"""A transactional Produce or TxnOffsetCommit sent on to the transaction coordinator's Kafka listener.

A client sends a partition's batches to the partition's leader, and a transaction's offsets to the group's
coordinator; both are held by the transactional id's coordinator, which in a cluster is often another
broker. The receiving broker forwards the request there as a Kafka client would (Produce v9,
TxnOffsetCommit v3; v12 and v5 for a request of transaction version 2, whose partitions and groups join the
transaction implicitly), marked by its client id so it is never forwarded twice.
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
_TV2_PRODUCE: Final = 12
_TV2_TXN_OFFSET_COMMIT: Final = 5
_TIMEOUT_S: Final = 30.0


class ForwardFailed(Exception):
    """The coordinator could not be reached or did not answer."""


def _frame(api_key: int, version: int, body: dict[str, Any]) -> bytes:
    cls = load_request_schema(api_key, version)
    header_cls = cls.__header_schema__
    head = {
        "request_api_key": api_key,
        "request_api_version": version,
        "correlation_id": 1,
        "client_id": FORWARDED_BY,
    }
    buf = io.BytesIO()
    entity_writer(header_cls)(buf, build(header_cls, head))
    entity_writer(cls)(buf, build(cls, body))
    return struct.pack(">i", len(buf.getvalue())) + buf.getvalue()


async def forward(host: str, port: int, api_key: int, version: int, body: dict[str, Any]) -> Any:
    """Send a request body to ``host:port``; the response entity.

    Raises:
        ForwardFailed: Connection refused or closed, or no answer within 30 s.
    """
    try:
        async with asyncio.timeout(_TIMEOUT_S):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                writer.write(_frame(api_key, version, body))
                await writer.drain()
                size = struct.unpack(">i", await reader.readexactly(4))[0]
                data = await reader.readexactly(size)
            finally:
                writer.close()
    except (OSError, TimeoutError, asyncio.IncompleteReadError) as exc:
        raise ForwardFailed(f"transaction coordinator {host}:{port}: {exc}") from exc
    cls = load_response_schema(api_key, version)
    _head, n = entity_reader(cls.__header_schema__)(data, 0)
    return entity_reader(cls)(data, n)[0]


async def forward_produce(
    host: str, port: int, body: dict[str, Any], implicit: bool = False
) -> list[dict[str, Any]]:
    """Send a Produce request body to ``host:port`` (as v12 with ``implicit``: transaction version 2);
    its per-topic ``responses`` as dicts.

    Raises:
        ForwardFailed: Connection refused or closed, or no answer within 30 s.
    """
    answer = await forward(host, port, 0, _TV2_PRODUCE if implicit else _VERSION, body)
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


async def forward_txn_offset_commit(
    host: str, port: int, body: dict[str, Any], version: int = 3
) -> dict[tuple[str, int], int]:
    """Send a TxnOffsetCommit body to ``host:port`` (v5 for a request of v5, whose group joins the
    transaction implicitly; else v3); the error code of each (topic, partition).

    Raises:
        ForwardFailed: Connection refused or closed, or no answer within 30 s.
    """
    answer = await forward(host, port, 28, 5 if version >= _TV2_TXN_OFFSET_COMMIT else 3, body)
    return {
        (str(t.name), int(p.partition_index)): int(p.error_code) for t in answer.topics for p in t.partitions
    }
