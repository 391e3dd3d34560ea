"""The published OpenAPI documents every request body, including those the REST Proxy routes parse by
hand (api/openapi_bodies.py), and a body built from it is one the server takes."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from gateway_harness import Gateway
from openapi_spec_validator import validate

#: write operations that take no body
NO_BODY = {("post", "/v1/producers")}


def test_every_write_documents_its_body_and_the_spec_is_valid(gateway: Gateway) -> None:
    spec = gateway.client.get("/openapi.json").json()
    validate(spec)
    missing = [
        (method, path)
        for path, ops in spec["paths"].items()
        for method, op in ops.items()
        if method in ("post", "put", "patch") and "requestBody" not in op and (method, path) not in NO_BODY
    ]
    assert missing == []
    v2 = spec["paths"]["/topics/{topic}"]["post"]["requestBody"]
    assert v2["required"] is True
    assert {"application/json", "application/vnd.kafka.json.v2+json"} <= set(v2["content"])
    assert v2["content"]["application/json"]["schema"]["required"] == ["records"]
    seek = spec["paths"]["/consumers/{group}/instances/{instance}/positions"]["post"]
    assert "204" in seek["responses"] and "200" not in seek["responses"]  # Confluent answers 204


def _schema(spec: dict[str, Any], method: str, path: str) -> dict[str, Any]:
    schema: dict[str, Any] = spec["paths"][path][method]["requestBody"]["content"]["application/json"][
        "schema"
    ]
    return schema


def test_bodies_the_schemas_accept_are_the_ones_the_server_takes(gateway: Gateway) -> None:
    spec = gateway.client.get("/openapi.json").json()
    cid = gateway.client.get("/v3/clusters").json()["data"][0]["cluster_id"]
    topics = f"/v3/clusters/{cid}/topics"
    create = {
        "topic_name": "docs",
        "partitions_count": 2,
        "configs": [{"name": "retention.ms", "value": "60000"}],
    }
    jsonschema.validate(create, _schema(spec, "post", "/v3/clusters/{cluster_id}/topics"))
    assert gateway.client.post(topics, json=create).status_code == 201
    record = {
        "partition_id": 1,
        "key": {"type": "STRING", "data": "k"},
        "value": {"type": "JSON", "data": {"n": 1}},
    }
    path = "/v3/clusters/{cluster_id}/topics/{topic_name}/records"
    jsonschema.validate(record, _schema(spec, "post", path))
    answer = gateway.client.post(f"{topics}/docs/records", json=record)
    assert answer.status_code == 200 and answer.json()["partition_id"] == 1, answer.text
    v2 = {"records": [{"key": "k", "value": {"n": 2}, "partition": 0}]}
    jsonschema.validate(v2, _schema(spec, "post", "/topics/{topic}"))
    headers = {"content-type": "application/vnd.kafka.json.v2+json"}
    answer = gateway.client.post("/topics/docs", json=v2, headers=headers)
    assert answer.status_code == 200 and answer.json()["offsets"][0]["offset"] == 0, answer.text
    alter = {"data": [{"name": "retention.ms", "value": "120000", "operation": "SET"}]}
    jsonschema.validate(
        alter, _schema(spec, "post", "/v3/clusters/{cluster_id}/topics/{topic_name}/configs:alter")
    )
    assert gateway.client.post(f"{topics}/docs/configs:alter", json=alter).status_code == 204
    with_bad = {"records": []}  # the schema says at least one record, as the server does (422)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(with_bad, _schema(spec, "post", "/topics/{topic}"))
    assert gateway.client.post("/topics/docs", json=with_bad, headers=headers).status_code == 422
