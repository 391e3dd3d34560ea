"""What the REST Proxy v2 consumer routes share: media types, body parsing and checks, records out.

Split from :mod:`.rest_v2_consumers` (its docstring tells the API), which keeps the routes.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from typing import Annotated, Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from fastapi import Depends, Request
from starlette.responses import Response

from topiclake.api import codec, http
from topiclake.api.consumer_instances import (
    ConsumerInstanceManager,
    InstanceConfig,
    TopicPartition,
    get_manager,
)
from topiclake.api.errors import HTTPError
from topiclake.schema_registry import rest_proxy as schema_reads

V2_JSON = "application/vnd.kafka.v2+json"
BINARY_V2 = "application/vnd.kafka.binary.v2+json"
JSON_V2 = "application/vnd.kafka.json.v2+json"
_SCHEMA_V2 = (
    "application/vnd.kafka.avro.v2+json",
    "application/vnd.kafka.jsonschema.v2+json",
    "application/vnd.kafka.protobuf.v2+json",
)
#: Request bodies Confluent's ConsumersResource consumes (plus plain JSON).
CONSUMES = (V2_JSON, BINARY_V2, JSON_V2, *_SCHEMA_V2, "application/vnd.kafka+json", "application/json")
#: Responses of the non-read endpoints.
PRODUCES = (V2_JSON, "application/vnd.kafka+json", "application/json", BINARY_V2, JSON_V2, *_SCHEMA_V2)
#: ``Accept`` of a read -> embedded format asked for (Jersey picks binary for the generic v2 types).
READ_FORMATS: dict[str, str] = {
    BINARY_V2: "binary",
    JSON_V2: "json",
    V2_JSON: "binary",
    "application/vnd.kafka+json": "binary",
    "application/json": "binary",
    "application/vnd.kafka.avro.v2+json": "avro",
    "application/vnd.kafka.jsonschema.v2+json": "jsonschema",
    "application/vnd.kafka.protobuf.v2+json": "protobuf",
}
_MAX_BODY = 1024 * 1024
_FORMAT_MEDIA = {fmt: mt for mt, fmt in READ_FORMATS.items() if fmt in ("avro", "jsonschema", "protobuf")}

Manager = Annotated[ConsumerInstanceManager, Depends(get_manager)]


async def _accept(request: Request) -> str:
    try:
        return http.negotiate(request, PRODUCES)
    except HTTPError as exc:
        raise HTTPError(406, 406, exc.message, code="not_acceptable") from None


Accept = Annotated[str, Depends(_accept)]


def _json(body: Any, status: int = 200, media: str = V2_JSON) -> Response:
    return Response(orjson.dumps(body), status_code=status, media_type=media)


def _no_content() -> Response:
    return Response(status_code=204)


def _bad_request(message: str) -> HTTPError:
    # Jackson mapping errors: 400 with error_code 400 (rest-utils' JsonMappingExceptionMapper)
    return HTTPError(400, 400, message, code="invalid_request")


def _invalid_config(message: str) -> HTTPError:
    return HTTPError(422, 42204, f"Invalid consumer configuration: {message}", code="invalid_config")


async def _body(request: Request, settings: Any, required: bool, what: str) -> dict[str, Any] | None:
    """The JSON object body (None when empty and not required)."""
    raw = await http.read_body(request, min(settings.max_request_bytes, _MAX_BODY))
    if not raw.strip():
        if required:
            # @NotNull on the resource's body parameter: a constraint violation
            raise HTTPError(422, 422, f"the {what} request needs a JSON body", code="invalid_request")
        return None
    mt = http.media_type(request)
    if mt and mt not in CONSUMES:
        raise HTTPError(
            415, 415, f"unsupported Content-Type {mt!r}; send {V2_JSON}", code="unsupported_media_type"
        )
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _bad_request(f"request body is not valid JSON: {exc}") from None
    if doc is None and not required:
        return None
    if not isinstance(doc, dict):
        raise _bad_request(f"the {what} body must be a JSON object, not {type(doc).__name__}")
    return doc


# ---------------------------------------------------------------------------------------------- parsing


def _as_int(value: Any, where: str) -> int:
    """An integer as Jackson reads one: a JSON integer, an integral float, or a numeric string."""
    if isinstance(value, bool):
        raise _bad_request(f"{where} must be an integer, not {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    raise _bad_request(f"{where} must be an integer, not {orjson.dumps(value).decode()[:40]}")


def _as_str(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise _bad_request(f"{where} must be a non-empty string, not {orjson.dumps(value).decode()[:40]}")
    return value


def _list(doc: dict[str, Any], key: str, what: str) -> list[Any]:
    raw = doc.get(key)
    if raw is None:
        raise HTTPError(422, 422, f"{what} needs '{key}': a list", code="invalid_request")
    if not isinstance(raw, list):
        raise _bad_request(f"'{key}' must be a list, not {type(raw).__name__}")
    return raw


def _item(raw: Any, where: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise _bad_request(f"{where} must be an object with topic and partition")
    return raw


def _tp(item: dict[str, Any], where: str) -> TopicPartition:
    if "partition" not in item:
        raise _bad_request(f"{where}.partition is required")
    partition = _as_int(item.get("partition"), f"{where}.partition")
    if partition < 0:
        raise _bad_request(f"{where}.partition must not be negative")
    return _as_str(item.get("topic"), f"{where}.topic"), partition


def _partitions(doc: dict[str, Any], what: str) -> list[TopicPartition]:
    return [
        _tp(_item(r, f"partitions[{i}]"), f"partitions[{i}]")
        for i, r in enumerate(_list(doc, "partitions", what))
    ]


def _bool(value: Any, name: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise _invalid_config(f"{name} must be true or false, not {value!r}")


def _config_int(value: Any, name: str, minimum: int) -> int:
    try:
        n = _as_int(value, name)
    except HTTPError:
        raise _invalid_config(f"{name} must be an integer, not {value!r}") from None
    if n < minimum:
        raise _invalid_config(f"{name} must be at least {minimum}, not {n}")
    return n


def _instance_config(
    doc: dict[str, Any], manager: ConsumerInstanceManager
) -> tuple[str | None, InstanceConfig]:
    """The instance name and config of a create request (Confluent's ``ConsumerInstanceConfig``)."""
    name = doc.get("name")
    if doc.get("id") is not None:  # the deprecated 'id' overrides 'name' in Confluent
        name = doc.get("id")
    if name is not None and (not isinstance(name, str) or not name or len(name) > 249 or "/" in name):
        raise _invalid_config(f"name must be a string of 1 to 249 characters without '/', not {name!r}")
    fmt = doc.get("format")
    fmt = "binary" if fmt is None else fmt
    if not isinstance(fmt, str):
        raise _invalid_config(f"format must be a string, not {fmt!r}")
    fmt = fmt.lower()
    if fmt not in ("json", "binary", "avro", "jsonschema", "protobuf"):
        raise _invalid_config(
            f"format must be json, binary, avro, jsonschema or protobuf, not {doc.get('format')!r}"
        )
    reset = doc.get("auto.offset.reset", "latest")
    reset = "latest" if reset is None else reset
    if not isinstance(reset, str) or reset.lower() not in ("earliest", "latest", "none"):
        raise _invalid_config(f"auto.offset.reset must be earliest, latest or none, not {reset!r}")
    commit_raw = doc.get("auto.commit.enable", doc.get("enable.auto.commit"))
    auto_commit = True if commit_raw is None else _bool(commit_raw, "auto.commit.enable")
    min_raw = doc.get("fetch.min.bytes")
    fetch_min = 1 if min_raw is None else _config_int(min_raw, "fetch.min.bytes", -1)
    timeout_raw = doc.get("consumer.request.timeout.ms")
    timeout = (
        manager.request_timeout_ms
        if timeout_raw is None
        else _config_int(timeout_raw, "consumer.request.timeout.ms", 0)
    )
    config = InstanceConfig(
        format=fmt,  # type: ignore[arg-type]
        auto_offset_reset="earliest"
        if reset.lower() == "earliest"
        else "none"
        if reset.lower() == "none"
        else "latest",
        auto_commit=auto_commit,
        fetch_min_bytes=max(1, fetch_min),
        request_timeout_ms=timeout,
    )
    return name, config


def _timestamp_ms(value: Any, where: str) -> int:
    """A seek timestamp: ISO-8601 (Confluent's ``Instant``) or epoch milliseconds."""
    if isinstance(value, str) and not value.strip().lstrip("-").isdigit():
        text = value.strip()
        try:
            parsed = dt.datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
        except ValueError:
            raise _bad_request(
                f"{where} must be an ISO-8601 instant or epoch milliseconds, not {value!r}"
            ) from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=dt.UTC)
        return math.floor(parsed.timestamp() * 1000)
    ms = _as_int(value, where)
    if ms < 0:
        raise _bad_request(f"{where} must not be negative")
    return ms


# ---------------------------------------------------------------------------------------------- records out


def _records_body(batches: list[pa.Table], fmt: str, registry: Any = None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    decode: Callable[[bytes | None, str], Any] = codec.decode
    if fmt in ("avro", "jsonschema", "protobuf"):
        decode = schema_reads.decoder(registry)
    for batch in batches:
        cols = batch.select(["topic", "partition", "offset", "key", "value", "headers"]).to_pydict()
        ts = pc.divide(pc.cast(batch["timestamp"], pa.int64()), 1000).to_pylist()
        for i in range(batch.num_rows):
            headers = cols["headers"][i]
            out.append(
                {
                    "topic": cols["topic"][i],
                    "key": decode(cols["key"][i], fmt),
                    "value": decode(cols["value"][i], fmt),
                    "partition": cols["partition"][i],
                    "offset": cols["offset"][i],
                    "timestamp": ts[i],
                    "headers": [
                        {"key": h["key"], "value": decode(h["value"], "binary")} for h in headers or ()
                    ],
                }
            )
    return out


def _read_format(request: Request) -> tuple[str, str | None]:
    """The response media type and the embedded format the ``Accept`` header asks for (None: any)."""
    accept = request.headers.get("accept", "").strip()
    wanted = http.accepted(request)
    if not wanted:
        return "", None
    for mt in wanted:
        if mt in READ_FORMATS:
            return mt, READ_FORMATS[mt]
        if mt in ("*/*", "application/*"):
            return "", None
    raise HTTPError(
        406,
        406,
        f"cannot answer a read with {accept!r}; acceptable: {BINARY_V2}, {JSON_V2}, {V2_JSON}",
        code="not_acceptable",
    )


def _query_int(request: Request, name: str) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        # JAX-RS answers an unparsable @QueryParam long with 404
        raise HTTPError(
            404, 404, f"query parameter {name} must be an integer, not {raw[:20]!r}", "http_error"
        ) from None
