"""Produce and fetch calls of the native API (one gateway; the cluster routing is in ``cluster``)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, cast

import httpx
import orjson

from topiclake.client._base import ClientBase
from topiclake.client._wire import ARROW_STREAM, NDJSON, error_from_body
from topiclake.client.responses import (
    Acks,
    ArrowProduceResponse,
    Encoding,
    FetchResponse,
    Offsets,
    ProduceResponse,
    ProduceResult,
)


class RecordsMixin(ClientBase):
    """Produce, fetch and offsets."""

    # ------------------------------------------------------------------ produce

    def produce(
        self,
        topic: str,
        records: Sequence[Mapping[str, Any]],
        *,
        acks: Acks = "all",
        partition: int | None = None,
        encoding: Encoding = "json",
        producer: Mapping[str, int] | None = None,
    ) -> ProduceResponse:
        """Produce records in one JSON request.

        Args:
            topic: Topic name.
            records: Dicts with ``key``, ``value``, ``headers`` (``{"k": "v"}`` or ``[{"key", "value"}]``),
                ``partition`` and ``timestamp`` (ms), all optional; key and value per ``encoding``.
            acks: ``all`` (after the Delta commit), ``1`` (once the leader has the records) or ``0``.
            partition: Partition for every record without its own.
            encoding: ``json`` (any JSON value, stored as its JSON text), ``binary`` (base64) or ``string``.
            producer: ``{"id", "epoch", "sequence"}`` of an idempotent producer.

        Returns:
            One result per record, in order; a record that failed has ``error`` set (the request as a
            whole raises only when it was refused entirely).
        """
        path = f"{self._topic_path(topic)}/records"
        if self._producer is not None and producer is None:
            return self._producer.produce(
                topic,
                path,
                records,
                acks=str(acks),
                partition=partition,
                encoding=encoding,
                idempotent=self._idempotent_for(str(acks)),
            )
        body: dict[str, Any] = {"records": list(records)}
        if producer is not None:
            body["producer"] = dict(producer)
        params = {"acks": str(acks), "partition": partition, "encoding": encoding}
        if partition is not None:
            resp = self._partition_request(
                topic, partition, "POST", path, json=body, params=params, safe_to_repeat=producer is not None
            )
            return cast(ProduceResponse, orjson.loads(resp.content))
        return cast(ProduceResponse, self._json("POST", path, json=body, params=params))

    def produce_stream(
        self,
        topic: str,
        records: Iterable[Mapping[str, Any] | str | bytes],
        *,
        acks: Acks = "all",
        partition: int | None = None,
        encoding: Encoding = "json",
    ) -> Iterator[ProduceResult]:
        """Produce newline-delimited JSON records in one streamed request; yield one result per record.

        ``records`` are dicts or ready NDJSON lines (``str``/``bytes``, without or with the newline). The
        body is sent as it is generated; the results are read after it (they come in order).
        """

        def lines() -> Iterator[bytes]:
            for r in records:
                if isinstance(r, bytes):
                    line = r
                elif isinstance(r, str):
                    line = r.encode()
                else:
                    line = orjson.dumps(r)
                yield line if line.endswith(b"\n") else line + b"\n"

        params = {
            k: v
            for k, v in {"acks": str(acks), "partition": partition, "encoding": encoding}.items()
            if v is not None
        }
        base = self._router.preferred if self._router is not None else ""
        request = self._http.build_request(
            "POST",
            f"{base}{self._topic_path(topic)}/records",
            content=lines(),
            params=params,
            headers={"content-type": NDJSON, "accept": NDJSON},
        )
        try:
            resp = self._http.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise self._transport_error(exc, base or None) from exc
        try:
            if resp.status_code >= 400:
                resp.read()
                raise error_from_body(resp.status_code, resp.content, resp.headers.get("retry-after"))
            for line in resp.iter_lines():
                if line.strip():
                    yield cast(ProduceResult, orjson.loads(line))
        except httpx.HTTPError as exc:
            raise self._transport_error(exc, base or None) from exc
        finally:
            resp.close()

    def produce_arrow(
        self, topic: str, partition: int, ipc_stream: bytes, *, acks: Acks = "all"
    ) -> ArrowProduceResponse:
        """Produce an Arrow IPC stream (columns ``key``, ``value`` as binary; optional ``headers``,
        ``timestamp_ms``) to one partition."""
        resp = self._partition_request(
            topic,
            partition,
            "POST",
            f"{self._topic_path(topic)}/records",
            content=ipc_stream,
            params={"acks": str(acks), "partition": partition},
            headers={"content-type": ARROW_STREAM},
        )
        return cast(ArrowProduceResponse, orjson.loads(resp.content))

    # ------------------------------------------------------------------ fetch and offsets

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_records: int = 500,
        max_bytes: int = 1024 * 1024,
        wait_ms: int = 0,
        encoding: Encoding = "binary",
    ) -> FetchResponse:
        """Committed records of one partition from ``offset`` on.

        ``wait_ms`` long-polls: the gateway answers when records arrive or the time is up.

        Raises:
            OffsetOutOfRange: ``offset`` is below the log start or beyond the end (``details`` has both).
        """
        params = {
            "offset": offset,
            "max_records": max_records,
            "max_bytes": max_bytes,
            "wait_ms": wait_ms,
            "encoding": encoding,
        }
        resp = self._partition_request(
            topic,
            partition,
            "GET",
            f"{self._topic_path(topic)}/partitions/{partition}/records",
            params=params,
            timeout=self.timeout + wait_ms / 1000,
        )
        return cast(FetchResponse, orjson.loads(resp.content))

    def fetch_arrow(self, topic: str, partition: int, offset: int, **params: int) -> bytes:
        """Like :meth:`fetch`, but the records as an Arrow IPC stream of the topic table's columns."""
        resp = self._partition_request(
            topic,
            partition,
            "GET",
            f"{self._topic_path(topic)}/partitions/{partition}/records",
            params={"offset": offset, **params},
            headers={"accept": ARROW_STREAM},
            timeout=self.timeout + params.get("wait_ms", 0) / 1000,
        )
        return resp.content

    def offsets(self, topic: str, partition: int, timestamp: int | None = None) -> Offsets:
        """Beginning and end offset of a partition, and the first offset at or after ``timestamp`` (ms)."""
        resp = self._partition_request(
            topic,
            partition,
            "GET",
            f"{self._topic_path(topic)}/partitions/{partition}/offsets",
            params={"timestamp": timestamp},
        )
        return cast(Offsets, orjson.loads(resp.content))
