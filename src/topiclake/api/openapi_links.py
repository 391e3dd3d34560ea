"""OpenAPI links: which answer feeds which request (create topic -> produce -> fetch, consumer instances...).

Links document how a client walks the API (the name a create answers is the ``{topic}`` of the routes
below it) and let a stateful fuzzer (schemathesis, tests/security/test_fuzz_api.py) reach the deeper routes
with ids the server really made, instead of guessing them. They are added to the generated schema, so the
routes stay as they are; a link to a route that does not exist is dropped, never published.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

from topiclake.api.openapi_bodies import add_request_bodies
from topiclake.api.openapi_errors import add_error_responses

#: (method, path, status) of the answer -> {link name: (method, path of the next request, parameters)}.
#: Parameters are OpenAPI runtime expressions (``$response.body#/name``, ``$request.path.group``).
Link = tuple[str, str, dict[str, str]]

_TOPIC = "$response.body#/name"
_V3 = "/v3/clusters/{cluster_id}"
_V3_TOPIC = f"{_V3}/topics/{{topic_name}}"
_V3_ARGS = {"cluster_id": "$response.body#/cluster_id", "topic_name": "$response.body#/topic_name"}
_INSTANCE = "/consumers/{group}/instances/{instance}"
_INSTANCE_ARGS = {"group": "$request.path.group", "instance": "$response.body#/instance_id"}
_MEMBER_ARGS = {"group": "$request.path.group", "member": "$response.body#/member_id"}

LINKS: dict[tuple[str, str, str], dict[str, Link]] = {
    ("post", "/v1/topics", "201"): {
        "DescribeTopic": ("get", "/v1/topics/{topic}", {"topic": _TOPIC}),
        "Produce": ("post", "/v1/topics/{topic}/records", {"topic": _TOPIC}),
        "Fetch": (
            "get",
            "/v1/topics/{topic}/partitions/{partition}/records",
            {"topic": _TOPIC, "partition": "0"},
        ),
        "Offsets": (
            "get",
            "/v1/topics/{topic}/partitions/{partition}/offsets",
            {"topic": _TOPIC, "partition": "0"},
        ),
        "AlterConfigs": ("patch", "/v1/topics/{topic}/configs", {"topic": _TOPIC}),
        "AddPartitions": ("post", "/v1/topics/{topic}/partitions", {"topic": _TOPIC}),
        "ListPartitions": ("get", "/v1/topics/{topic}/partitions", {"topic": _TOPIC}),
        "ProduceV2": ("post", "/topics/{topic}", {"topic": _TOPIC}),
        "ProduceV2Partition": (
            "post",
            "/topics/{topic}/partitions/{partition}",
            {"topic": _TOPIC, "partition": "0"},
        ),
        "DescribeTopicV2": ("get", "/topics/{topic}", {"topic": _TOPIC}),
        "DeleteTopic": ("delete", "/v1/topics/{topic}", {"topic": _TOPIC}),
    },
    ("post", "/v1/topics/{topic}/records", "200"): {
        "FetchProduced": (
            "get",
            "/v1/topics/{topic}/partitions/{partition}/records",
            {
                "topic": "$request.path.topic",
                "partition": "$response.body#/results/0/partition",
                "offset": "$response.body#/results/0/offset",
            },
        ),
    },
    ("post", "/v1/groups/{group}/members", "200"): {
        "Heartbeat": ("post", "/v1/groups/{group}/members/{member}/heartbeat", _MEMBER_ARGS),
        "Leave": ("delete", "/v1/groups/{group}/members/{member}", _MEMBER_ARGS),
        "Commit": ("post", "/v1/groups/{group}/offsets", {"group": "$request.path.group"}),
        "Committed": ("get", "/v1/groups/{group}/offsets", {"group": "$request.path.group"}),
        "Describe": ("get", "/v1/groups/{group}", {"group": "$request.path.group"}),
        "Lag": ("get", "/v1/groups/{group}/lag", {"group": "$request.path.group"}),
    },
    ("post", "/consumers/{group}", "200"): {
        "Subscribe": ("post", f"{_INSTANCE}/subscription", _INSTANCE_ARGS),
        "Subscription": ("get", f"{_INSTANCE}/subscription", _INSTANCE_ARGS),
        "Assign": ("post", f"{_INSTANCE}/assignments", _INSTANCE_ARGS),
        "Records": ("get", f"{_INSTANCE}/records", _INSTANCE_ARGS),
        "CommitOffsets": ("post", f"{_INSTANCE}/offsets", _INSTANCE_ARGS),
        "CommittedOffsets": ("get", f"{_INSTANCE}/offsets", _INSTANCE_ARGS),
        "Seek": ("post", f"{_INSTANCE}/positions", _INSTANCE_ARGS),
        "SeekToBeginning": ("post", f"{_INSTANCE}/positions/beginning", _INSTANCE_ARGS),
        "Unsubscribe": ("delete", f"{_INSTANCE}/subscription", _INSTANCE_ARGS),
        "DeleteInstance": ("delete", _INSTANCE, _INSTANCE_ARGS),
    },
    ("get", "/v3/clusters", "200"): {
        name: (method, path, {"cluster_id": "$response.body#/data/0/cluster_id"})
        for name, method, path in (
            ("GetCluster", "get", _V3),
            ("ListTopics", "get", f"{_V3}/topics"),
            ("CreateTopic", "post", f"{_V3}/topics"),
            ("ListBrokers", "get", f"{_V3}/brokers"),
            ("ListGroups", "get", f"{_V3}/consumer-groups"),
            ("AllTopicConfigs", "get", f"{_V3}/topics/-/configs"),
        )
    },
    ("post", f"{_V3}/topics", "200"): {
        "GetTopic": ("get", _V3_TOPIC, _V3_ARGS),
        "ProduceV3": ("post", f"{_V3_TOPIC}/records", _V3_ARGS),
        "ProduceBatchV3": ("post", f"{_V3_TOPIC}/records:batch", _V3_ARGS),
        "ListConfigs": ("get", f"{_V3_TOPIC}/configs", _V3_ARGS),
        "AlterConfigs": ("post", f"{_V3_TOPIC}/configs:alter", _V3_ARGS),
        "ListPartitions": ("get", f"{_V3_TOPIC}/partitions", _V3_ARGS),
        "UpdatePartitions": ("patch", _V3_TOPIC, _V3_ARGS),
        "DeleteTopic": ("delete", _V3_TOPIC, _V3_ARGS),
    },
}


def _ref(method: str, path: str) -> str:
    return "#/paths/" + path.replace("~", "~0").replace("/", "~1") + "/" + method


def add_links(schema: dict[str, Any]) -> dict[str, Any]:
    """Add :data:`LINKS` to a generated OpenAPI document (in place; returned for chaining)."""
    paths: dict[str, Any] = schema.get("paths", {})
    for (method, path, status), links in LINKS.items():
        answer = paths.get(path, {}).get(method, {}).get("responses", {}).get(status)
        if answer is None:
            continue
        answer["links"] = {
            name: {"operationRef": _ref(m, p), "parameters": params}
            for name, (m, p, params) in links.items()
            if m in paths.get(p, {})
        }
    return schema


def install(app: FastAPI) -> None:
    """Make ``app.openapi()`` (and ``/openapi.json``) carry the links, the documented errors
    (:mod:`topiclake.api.openapi_errors`) and the request bodies (:mod:`topiclake.api.openapi_bodies`)."""
    generate: Callable[[], dict[str, Any]] = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = add_links(add_error_responses(add_request_bodies(generate())))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
