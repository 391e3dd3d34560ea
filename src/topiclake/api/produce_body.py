"""Native produce bodies: JSON records into columns, and per-record results back into JSON.

Shared by the documented produce route (routes/native_records.py) and its fast path (fast_produce.py).
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import chain, repeat
from typing import Any

import orjson

from topiclake.api import codec
from topiclake.errors import InvalidRecord
from topiclake.platform import ProducerInfo, RecordResult
from topiclake.platform.log.rows import Rows
from topiclake.platform.produce_rows import PendingProduce


def rows_from_json(
    objs: list[Any], encoding: str, serialize: Callable[[Any, bool], bytes | None] | None = None
) -> tuple[Rows, list[int | None], dict[int, InvalidRecord]]:
    """The records that can be encoded as column lists, their explicit partitions, and the errors of those
    that cannot (by position in ``objs``). One pass, no per-record objects. ``serialize`` (keys and values
    with registered schemas) replaces the encoding when given."""
    if serialize is None and encoding == "json":
        plain = _plain_json(objs)
        if plain is not None:
            return plain
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    headers: list[list[dict[str, Any]] | None] = []
    stamps: list[int | None] = []
    explicit: list[int | None] = []
    errors: dict[int, InvalidRecord] = {}
    as_json = encoding == "json"
    header_encoding = "binary" if encoding == "binary" else "string"
    dumps = orjson.dumps
    for i, obj in enumerate(objs):
        try:
            if isinstance(obj, InvalidRecord):  # a stream line that was not JSON
                raise obj
            if not isinstance(obj, dict):
                raise InvalidRecord(
                    "each record must be a JSON object with key, value, headers, partition, timestamp"
                )
            k = obj.get("key")
            v = obj.get("value")
            if serialize is not None:
                key, value = serialize(k, True), serialize(v, False)
            elif as_json:  # a string key is its UTF-8 text, as Kafka's StringSerializer writes it
                key = None if k is None else k.encode() if type(k) is str else dumps(k)
                value = None if v is None else dumps(v)
            else:
                key = codec.encode(k, encoding, "key")
                value = codec.encode(v, encoding, "value")
            h = obj.get("headers")
            hdrs = None if h is None else codec.header_dicts(h, header_encoding)
            partition = obj.get("partition")
            if partition is not None and (type(partition) is not int):
                raise InvalidRecord(f"partition must be an integer, not {partition!r}")
            ts = obj.get("timestamp")
            if ts is not None and type(ts) is not int:
                raise InvalidRecord(f"timestamp must be an integer (ms since the epoch), not {ts!r}")
        except InvalidRecord as exc:
            errors[i] = exc
            continue
        keys.append(key)
        values.append(value)
        headers.append(hdrs)
        stamps.append(ts)
        explicit.append(partition)
    return Rows(keys, values, headers, stamps), explicit, errors


_PLAIN = frozenset(("key", "value"))
_ESCAPED = bytes(range(0x20)) + b'"\\'  # what JSON escapes in a string (never part of a UTF-8 sequence)


def _plain_json(objs: list[Any]) -> tuple[Rows, list[int | None], dict[int, InvalidRecord]] | None:
    """:func:`rows_from_json` for the common JSON body, records of only ``key`` and ``value``, in list
    comprehensions and C loops (no per-record calls but the serialisation); None when any record has more.
    """
    if set(map(type, objs)) != {dict} or not set().union(*objs) <= _PLAIN:
        return None
    dumps = orjson.dumps
    n = len(objs)
    texts = [o.get("value") for o in objs]
    values: list[bytes | None] | None = None
    if set(map(type, texts)) == {str}:
        # JSON text of a string with nothing to escape is the string in quotes: what orjson.dumps
        # writes, at a fifth of the cost of a call per record
        try:
            joined = "".join(texts).encode()
            if len(joined.translate(None, _ESCAPED)) == len(joined):
                values = [f'"{v}"'.encode() for v in texts]
        except UnicodeEncodeError:  # a lone surrogate: orjson.dumps judges it, as on the general path
            values = None
    if values is None:
        values = [None if v is None else dumps(v) for v in texts]
    if any("key" in o for o in objs):
        keys = [
            None if (k := o.get("key")) is None else k.encode() if type(k) is str else dumps(k) for o in objs
        ]
    else:
        keys = [None] * n
    return Rows(keys, values, [None] * n, [None] * n), [None] * n, {}


def producer_from_json(obj: Any) -> ProducerInfo | None:
    """``{"id", "epoch", "sequence"}``, and ``"scope"``: the partition whose own sequence numbers these are
    (a Kafka producer numbers each partition apart; a broker forwarding its request to the leader sends
    it, else the leader would take another partition's batch with the same numbers for a retry)."""
    if obj is None:
        return None
    try:
        scope = obj.get("scope")
        return ProducerInfo(
            int(obj["id"]),
            int(obj.get("epoch", 0)),
            int(obj["sequence"]),
            None if scope is None else int(scope),
        )
    except (TypeError, KeyError, ValueError, AttributeError) as exc:
        raise InvalidRecord(
            'producer must be {"id": int, "epoch": int, "sequence": int} (optionally "scope": partition)'
        ) from exc


def result_bodies(
    produced: list[RecordResult], errors: dict[int, InvalidRecord], n: int
) -> list[dict[str, Any]]:
    """Result bodies in request order: the produced ones, and the parse errors at their places."""
    if not errors:  # inline: a function call per record costs as much as the dict
        return [
            {"partition": r.partition, "offset": r.offset, "timestamp": r.timestamp_ms, "error": None}
            if r.error is None
            else result_body(r)
            for r in produced
        ]
    done = iter(produced)
    return [
        result_body(RecordResult(None, None, None, errors[i]) if i in errors else next(done))
        for i in range(n)
    ]


def answer_bodies(pending: PendingProduce, errors: dict[int, InvalidRecord], n: int) -> list[dict[str, Any]]:
    """``result_bodies(pending.finish(), errors, n)``, built straight from where the batches went when no
    record failed and none carried its own timestamp (a result object per record was a quarter of a
    1,000-record request's CPU)."""
    handle = pending.handle
    if errors or handle is None or handle.by_sequence is not None or len(pending.ok) != n:
        return result_bodies(pending.finish(), errors, n)
    if pending.stamps.count(None) != n:
        return result_bodies(pending.finish(), errors, n)
    now = handle.append_time_ms
    if pending.acks == "0":
        return [{"partition": p, "offset": None, "timestamp": now, "error": None} for p in pending.targets]
    parts = handle.parts
    if len(parts) == 1:  # one partition: the batch holds the request's rows in order
        ((p, base, count),) = parts
        return [
            {"partition": p, "offset": o, "timestamp": now, "error": None} for o in range(base, base + count)
        ]
    out: list[dict[str, Any]] = [{}] * n
    for (p, base, _), rows in zip(parts, pending.batch_rows, strict=True):
        for k, j in enumerate(rows):
            out[j] = {"partition": p, "offset": base + k, "timestamp": now, "error": None}
    return out


def answer_json(
    topic: str, pending: PendingProduce, errors: dict[int, InvalidRecord], n: int
) -> bytes | None:
    """The answer ``{"topic": ..., "results": answer_bodies(...)}`` as ``orjson.dumps`` writes it, byte for
    byte, when every record was queued and acknowledged with the request's append time (the common case);
    None otherwise. Made as text by joins over ``map`` (C loops), not a dict per record: those 1,000
    dicts of a 1,000-record answer were a third of its CPU on the event loop and fed the collector."""
    handle = pending.handle
    if errors or handle is None or handle.by_sequence is not None or pending.acks == "0":
        return None
    stamp = handle.append_time_ms
    if len(pending.ok) != n or pending.stamps.count(None) != n or type(stamp) is not int:
        return None
    head = b'{"topic":' + orjson.dumps(topic) + b',"results":['
    tail = f',"timestamp":{stamp},"error":null}}'
    parts = handle.parts
    if len(parts) == 1:  # one partition: the batch holds the request's rows in order
        ((p, base, count),) = parts
        first = f'{{"partition":{p},"offset":'
        text = first + (tail + "," + first).join(map(str, range(base, base + count))) + tail
        return head + text.encode() + b"]}"
    offsets = [0] * n
    for (_, base, _), rows in zip(parts, pending.batch_rows, strict=True):
        for k, j in enumerate(rows, base):
            offsets[j] = k
    firsts = {p: f'{{"partition":{p},"offset":' for p, _, _ in parts}
    sep = tail + ","
    starts = map(firsts.__getitem__, pending.targets)
    pieces = chain.from_iterable(zip(starts, map(str, offsets), repeat(sep)))
    return head + "".join(pieces)[: -len(sep)].encode() + tail.encode() + b"]}"


def result_body(res: RecordResult) -> dict[str, Any]:
    error = None
    if res.error is not None:
        error = {"code": res.error.code, "message": res.error.message}
    return {"partition": res.partition, "offset": res.offset, "timestamp": res.timestamp_ms, "error": error}
