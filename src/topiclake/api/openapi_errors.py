"""Document, in the generated OpenAPI, the answers every route can give besides its success.

Every operation may answer 4xx and 5xx in its family's error shape (api/errors.py): the native routes
``{"error": {"code", "message", "retriable", "details"}}``, the REST Proxy routes ``{"error_code",
"message"}``. FastAPI documents only the success and a 422 in its own ``{"detail": [...]}`` shape, which
topiclake never answers; this module replaces that 422, adds the ``4XX``/``5XX`` ranges, the REST Proxy v2
media types (``application/vnd.kafka.v2+json`` and the embedded formats, chosen by ``Accept``), and the
204 of deletes. Clients and the fuzzer (tests/security/test_fuzz_api.py) then read what the server does.
"""

from __future__ import annotations

from typing import Any

from topiclake.api.errors import is_native

NATIVE_ERROR: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "retriable"],
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "retriable": {"type": "boolean"},
                "details": {"type": "object"},
            },
        }
    },
}
CONFLUENT_ERROR: dict[str, Any] = {
    "type": "object",
    "required": ["error_code", "message"],
    "properties": {"error_code": {"type": "integer"}, "message": {"type": "string"}},
}
V2_MEDIA = (
    "application/vnd.kafka.v2+json",
    *(f"application/vnd.kafka.{f}.v2+json" for f in ("binary", "json", "avro", "jsonschema", "protobuf")),
)


def _v2(path: str) -> bool:
    return not is_native(path) and not path.startswith("/v3/")


def add_error_responses(schema: dict[str, Any]) -> dict[str, Any]:
    """Document the error answers of every operation (in place; returned for chaining)."""
    for path, operations in schema.get("paths", {}).items():
        shape = NATIVE_ERROR if is_native(path) else CONFLUENT_ERROR
        media = ("application/json", *V2_MEDIA) if _v2(path) else ("application/json",)
        errors = {m: {"schema": shape} for m in media}
        for method, op in operations.items():
            responses: dict[str, Any] = op.setdefault("responses", {})
            responses["422"] = {"description": "The request does not validate.", "content": errors}
            responses.setdefault("4XX", {"description": "The request was refused.", "content": errors})
            responses.setdefault(
                "5XX", {"description": "The server could not serve it now.", "content": errors}
            )
            if method == "delete":
                responses.setdefault("204", {"description": "Done; nothing to answer."})
            if _v2(path):
                for status, answer in responses.items():
                    content = answer.get("content", {})
                    if status.startswith("2") and "application/json" in content:
                        for m in V2_MEDIA:
                            content.setdefault(m, content["application/json"])
    return schema
