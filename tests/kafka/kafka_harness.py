"""Helpers of the Kafka listener tests (imported by name: ``from kafka_harness import ...``; the name is
unique in the test tree, unlike ``conftest``): the running gateway's Kafka address, free ports, and raw
Kafka frames built with kio for the wire-level tests."""

from __future__ import annotations

import io
import socket
import struct
from dataclasses import dataclass
from typing import Any

from gateway_harness import Gateway
from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from topiclake.kafka.codec import build

HELLO = {"client_software_name": "t", "client_software_version": "1"}


@dataclass
class KafkaGateway:
    """A running gateway and its Kafka bootstrap address."""

    gw: Gateway
    bootstrap: str
    port: int


def connect(kafka: KafkaGateway) -> socket.socket:
    return socket.create_connection(("127.0.0.1", kafka.port), timeout=10)


def frame(api_key: int, version: int, body: dict[str, Any], correlation_id: int = 7) -> bytes:
    cls = load_request_schema(api_key, version)
    buf = io.BytesIO()
    header_cls = cls.__header_schema__
    header = build(
        header_cls,
        {
            "request_api_key": api_key,
            "request_api_version": version,
            "correlation_id": correlation_id,
            "client_id": "wire-test",
        },
    )
    entity_writer(header_cls)(buf, header)
    entity_writer(cls)(buf, build(cls, body))
    data = buf.getvalue()
    return struct.pack(">i", len(data)) + data


def read_frame(sock: socket.socket) -> bytes:
    head = b""
    while len(head) < 4:
        chunk = sock.recv(4 - len(head))
        if not chunk:
            raise ConnectionError("closed")
        head += chunk
    (size,) = struct.unpack(">i", head)
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def response(api_key: int, version: int, data: bytes) -> Any:
    cls = load_response_schema(api_key, version)
    _header, n = entity_reader(cls.__header_schema__)(data, 0)
    return entity_reader(cls)(data, n)[0]
