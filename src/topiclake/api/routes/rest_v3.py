"""Confluent Kafka REST Proxy v3 admin resources: clusters, brokers, topics, topic configs, partitions.

Shapes, links, status codes and ``{"error_code", "message"}`` bodies follow Confluent's
``api/v3/openapi.yaml`` and its resources. This gateway is one broker of one cluster whose id is
:attr:`Broker.cluster_id`; a request naming another cluster gets Confluent's 404 (``error_code`` 404).
Unknown topics and partitions get Confluent's v3 admin answer, 404 with ``error_code`` 40403 ("This server
does not host this topic-partition"), where the v2 API answers 40401/40402. Produce lives in
:mod:`.rest_v3_records`.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from topiclake import errors as e
from topiclake.api.auth import access_of
from topiclake.api.deps import BrokerDep, SettingsDep
from topiclake.api.errors import HTTPError
from topiclake.api.routes import rest_v3_records
from topiclake.api.routes._rest_v3 import (
    JSON,
    T,
    bad_request,
    broker_data,
    call,
    check_cluster,
    check_topic_name,
    cluster_data,
    collection,
    config_data,
    crn,
    json_body,
    json_response,
    partition_data,
    replica_data,
    topic_data,
    url,
)
from topiclake.api.routes._rest_v3 import accept_json as _accept
from topiclake.api.routes._rest_v3 import int_field as _int
from topiclake.api.routes._rest_v3 import json_object as _object
from topiclake.api.routes._rest_v3 import partition_id as _partition_id
from topiclake.api.routes._rest_v3 import topic_body as _topic
from topiclake.platform import Broker, TopicConfig, TopicInfo, validate_topic_name
from topiclake.platform.catalog import MAX_PARTITIONS
from topiclake.platform.catalog.topic_config import CONFIG_NAMES
from topiclake.security import Operation

router = APIRouter(prefix="/v3", tags=["kafka-rest-v3"])

#: The router, and the shared helpers this module held before :mod:`._rest_v3` (still importable from here).
__all__ = [
    "JSON",
    "T",
    "bad_request",
    "broker_data",
    "call",
    "check_cluster",
    "check_topic_name",
    "cluster_data",
    "collection",
    "config_data",
    "crn",
    "json_body",
    "json_response",
    "partition_data",
    "replica_data",
    "router",
    "topic_data",
    "url",
]

# ---------------------------------------------------------------------------------------------- clusters


@router.get("/clusters", summary="List clusters (this one)")
async def list_clusters(request: Request, broker: BrokerDep) -> Response:
    _accept(request)
    return json_response(
        collection("KafkaClusterList", url(request, "clusters"), [cluster_data(request, broker)])
    )


@router.get("/clusters/{cluster_id}", summary="Get the cluster")
async def get_cluster(request: Request, broker: BrokerDep, cluster_id: str) -> Response:
    _accept(request)
    check_cluster(broker, cluster_id)
    return json_response(cluster_data(request, broker))


@router.get("/clusters/{cluster_id}/brokers", summary="List brokers (this one)")
async def list_brokers(
    request: Request, broker: BrokerDep, settings: SettingsDep, cluster_id: str
) -> Response:
    _accept(request)
    check_cluster(broker, cluster_id)
    data = [broker_data(request, cluster_id, b) for b in broker.metadata().brokers]
    return json_response(collection("KafkaBrokerList", url(request, "clusters", cluster_id, "brokers"), data))


@router.get("/clusters/{cluster_id}/brokers/{broker_id}", summary="Get a broker")
async def get_broker(
    request: Request, broker: BrokerDep, settings: SettingsDep, cluster_id: str, broker_id: str
) -> Response:
    _accept(request)
    check_cluster(broker, cluster_id)
    found = next((b for b in broker.metadata().brokers if str(b.broker_id) == broker_id), None)
    if found is None:
        raise HTTPError(404, 404, f"Broker {broker_id} cannot be found.", code="broker_not_found")
    return json_response(broker_data(request, cluster_id, found))


# ---------------------------------------------------------------------------------------------- topics


@router.get("/clusters/{cluster_id}/topics", summary="List topics")
async def list_topics(request: Request, broker: BrokerDep, cluster_id: str) -> Response:
    _accept(request)
    check_cluster(broker, cluster_id)
    infos = access_of(request.scope).visible(await call(broker.list_topics), lambda i: i.name)
    data = [_topic(request, cluster_id, info) for info in sorted(infos, key=lambda i: i.name)]
    return json_response(collection("KafkaTopicList", url(request, "clusters", cluster_id, "topics"), data))


@router.post(
    "/clusters/{cluster_id}/topics", summary="Create a topic (201), or validate it (validate_only: 200)"
)
async def create_topic(
    request: Request, broker: BrokerDep, settings: SettingsDep, cluster_id: str
) -> Response:
    _accept(request)
    check_cluster(broker, cluster_id)
    body = _object(await json_body(request, settings), "create topic")
    name = body.get("topic_name")
    if not isinstance(name, str):
        raise bad_request("topic_name is required and must be a string")
    validate_topic_name(name)
    access_of(request.scope).require_create(name)
    assignments = body.get("replicas_assignments") or []
    if not isinstance(assignments, list):
        raise bad_request("replicas_assignments must be a list")
    default_count = len(assignments) or 1  # Kafka's num.partitions default, or one per explicit assignment
    raw_count = body.get("partitions_count")
    partitions = default_count if raw_count is None else _int(raw_count, "partitions_count")
    configs = _configs(body.get("configs"))
    if body.get("replication_factor") is not None:
        configs["replication.factor"] = _int(body["replication_factor"], "replication_factor")
    validate_only = body.get("validate_only") is True
    if validate_only:
        await call(_validate_create, broker, name, partitions, configs)
        rf = TopicConfig.from_kafka(configs).replication_factor
        return json_response(topic_data(request, cluster_id, name, partitions, rf))
    info = await call(broker.create_topic, name, partitions, configs)
    body_out = _topic(request, cluster_id, info)
    return json_response(body_out, 201, headers={"Location": body_out["metadata"]["self"]})


def _configs(raw: Any) -> dict[str, str | int]:
    """``[{"name", "value"}]`` (Confluent) or ``{"name": "value"}``; a null value keeps the default."""
    if raw is None:
        return {}
    pairs: list[tuple[Any, Any]]
    if isinstance(raw, dict):
        pairs = list(raw.items())
    elif isinstance(raw, list) and all(isinstance(c, dict) for c in raw):
        pairs = [(c.get("name"), c.get("value")) for c in raw]
    else:
        raise bad_request('configs must be a list of {"name", "value"} objects')
    out: dict[str, str | int] = {}
    for name, value in pairs:
        if not isinstance(name, str):
            raise bad_request("every config needs a string name")
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise bad_request(f"the value of config {name} must be a string")
        out[name] = value
    return out


def _validate_create(broker: Broker, name: str, partitions: int, configs: dict[str, str | int]) -> None:
    if not 1 <= partitions <= MAX_PARTITIONS:
        raise e.InvalidPartitions(
            f"partitions_count must be between 1 and {MAX_PARTITIONS}, got {partitions}"
        )
    TopicConfig.from_kafka(configs)
    try:
        broker.describe_topic(name)
    except e.TopicNotFound:
        return
    raise e.TopicExists(f"Topic '{name}' already exists.", topic=name)


@router.get("/clusters/{cluster_id}/topics/-/configs", summary="List the configs of every topic")
async def list_all_topic_configs(request: Request, broker: BrokerDep, cluster_id: str) -> Response:
    _accept(request)
    check_cluster(broker, cluster_id)
    infos = sorted(await call(broker.list_topics), key=lambda i: i.name)
    infos = access_of(request.scope).visible(infos, lambda i: i.name, operation=Operation.DESCRIBE_CONFIGS)
    data = [config_data(request, cluster_id, info, name) for info in infos for name in CONFIG_NAMES]
    self_url = url(request, "clusters", cluster_id, "topics", "-", "configs")
    return json_response(collection("KafkaTopicConfigList", self_url, data))


@router.get("/clusters/{cluster_id}/topics/{topic_name}", summary="Get a topic")
async def get_topic(request: Request, broker: BrokerDep, cluster_id: str, topic_name: str) -> Response:
    _accept(request)
    check_cluster(broker, cluster_id)
    info = await call(broker.describe_topic, check_topic_name(topic_name))
    return json_response(_topic(request, cluster_id, info))


@router.patch("/clusters/{cluster_id}/topics/{topic_name}", summary="Increase the partition count")
async def update_partition_count(
    request: Request, broker: BrokerDep, settings: SettingsDep, cluster_id: str, topic_name: str
) -> Response:
    _accept(request)
    check_cluster(broker, cluster_id)
    check_topic_name(topic_name)
    body = _object(await json_body(request, settings), "update partition count")
    count = _int(body.get("partitions_count"), "partitions_count")
    info = await call(broker.increase_partitions, topic_name, count)
    return json_response(_topic(request, cluster_id, info))


@router.delete("/clusters/{cluster_id}/topics/{topic_name}", status_code=204, summary="Delete a topic")
async def delete_topic(request: Request, broker: BrokerDep, cluster_id: str, topic_name: str) -> Response:
    _accept(request)
    check_cluster(broker, cluster_id)
    await call(broker.delete_topic, check_topic_name(topic_name))
    return Response(status_code=204)


# ---------------------------------------------------------------------------------------------- configs


@router.get("/clusters/{cluster_id}/topics/{topic_name}/configs", summary="List a topic's configs")
async def list_topic_configs(
    request: Request, broker: BrokerDep, cluster_id: str, topic_name: str
) -> Response:
    _accept(request)
    check_cluster(broker, cluster_id)
    info = await call(broker.describe_topic, check_topic_name(topic_name))
    data = [config_data(request, cluster_id, info, name) for name in CONFIG_NAMES]
    self_url = url(request, "clusters", cluster_id, "topics", topic_name, "configs")
    return json_response(collection("KafkaTopicConfigList", self_url, data))


@router.post(
    "/clusters/{cluster_id}/topics/{topic_name}/configs:alter", status_code=204, summary="Batch alter"
)
async def alter_topic_configs(
    request: Request, broker: BrokerDep, settings: SettingsDep, cluster_id: str, topic_name: str
) -> Response:
    _accept(request)
    check_cluster(broker, cluster_id)
    check_topic_name(topic_name)
    body = _object(await json_body(request, settings), "alter configs")
    data = body.get("data")
    if not isinstance(data, list) or not all(isinstance(d, dict) for d in data):
        raise bad_request('data must be a list of {"name", "value", "operation"} objects')
    to_set: dict[str, str | int] = {}
    to_delete: list[str] = []
    for entry in data:
        name, op = entry.get("name"), entry.get("operation") or "SET"
        if not isinstance(name, str) or not isinstance(op, str) or op.upper() not in ("SET", "DELETE"):
            raise bad_request("each entry needs a string name and an operation of SET or DELETE")
        if op.upper() == "DELETE":
            to_delete.append(name)
        else:
            to_set[name] = _config_value(entry.get("value"), name)
    if body.get("validate_only") is True:
        info = await call(broker.describe_topic, topic_name)
        info.config.with_changes(to_set, to_delete)
    else:
        await call(broker.alter_topic_configs, topic_name, to_set, to_delete)
    return Response(status_code=204)


def _config_value(value: Any, name: str) -> str | int:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise e.InvalidConfig(f"config {name} needs a string value, got {value!r}", config=name)
    return value


def _config_name(info: TopicInfo, name: str) -> str:
    if name not in CONFIG_NAMES:
        raise HTTPError(
            404, 404, f"Config {name} cannot be found for topic {info.name}.", code="config_not_found"
        )
    return name


@router.get("/clusters/{cluster_id}/topics/{topic_name}/configs/{name}", summary="Get a topic config")
async def get_topic_config(
    request: Request, broker: BrokerDep, cluster_id: str, topic_name: str, name: str
) -> Response:
    _accept(request)
    check_cluster(broker, cluster_id)
    info = await call(broker.describe_topic, check_topic_name(topic_name))
    return json_response(config_data(request, cluster_id, info, _config_name(info, name)))


@router.put(
    "/clusters/{cluster_id}/topics/{topic_name}/configs/{name}", status_code=204, summary="Set a config"
)
async def update_topic_config(
    request: Request, broker: BrokerDep, settings: SettingsDep, cluster_id: str, topic_name: str, name: str
) -> Response:
    _accept(request)
    check_cluster(broker, cluster_id)
    check_topic_name(topic_name)
    body = _object(await json_body(request, settings), "update config")
    value = _config_value(body.get("value"), name)
    await call(broker.alter_topic_configs, topic_name, {name: value})
    return Response(status_code=204)


@router.delete("/clusters/{cluster_id}/topics/{topic_name}/configs/{name}", status_code=204, summary="Reset")
async def reset_topic_config(
    request: Request, broker: BrokerDep, cluster_id: str, topic_name: str, name: str
) -> Response:
    _accept(request)
    check_cluster(broker, cluster_id)
    info = await call(broker.describe_topic, check_topic_name(topic_name))
    await call(broker.alter_topic_configs, topic_name, None, [_config_name(info, name)])
    return Response(status_code=204)


# ---------------------------------------------------------------------------------------------- partitions


@router.get("/clusters/{cluster_id}/topics/{topic_name}/partitions", summary="List a topic's partitions")
async def list_partitions(request: Request, broker: BrokerDep, cluster_id: str, topic_name: str) -> Response:
    _accept(request)
    check_cluster(broker, cluster_id)
    info = await call(broker.describe_topic, check_topic_name(topic_name))
    data = [
        partition_data(request, cluster_id, info.name, p, broker.partition_state(info.name, p).leader)
        for p in range(info.partitions)
    ]
    self_url = url(request, "clusters", cluster_id, "topics", topic_name, "partitions")
    return json_response(collection("KafkaPartitionList", self_url, data))


@router.get("/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}", summary="Get a partition")
async def get_partition(
    request: Request, broker: BrokerDep, cluster_id: str, topic_name: str, partition_id: str
) -> Response:
    _accept(request)
    check_cluster(broker, cluster_id)
    info = await call(broker.describe_topic, check_topic_name(topic_name))
    p = _partition_id(partition_id, info)
    leader = broker.partition_state(info.name, p).leader
    return json_response(partition_data(request, cluster_id, info.name, p, leader))


@router.get(
    "/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}/replicas", summary="Replicas"
)
async def list_replicas(
    request: Request, broker: BrokerDep, cluster_id: str, topic_name: str, partition_id: str
) -> Response:
    _accept(request)
    check_cluster(broker, cluster_id)
    info = await call(broker.describe_topic, check_topic_name(topic_name))
    p = _partition_id(partition_id, info)
    state = broker.partition_state(info.name, p)
    data = [replica_data(request, cluster_id, state, r) for r in state.replicas]
    self_url = url(request, "clusters", cluster_id, "topics", topic_name, "partitions", p, "replicas")
    return json_response(collection("KafkaReplicaList", self_url, data))


@router.get(
    "/clusters/{cluster_id}/topics/{topic_name}/partitions/{partition_id}/replicas/{broker_id}",
    summary="Get a replica",
)
async def get_replica(
    request: Request, broker: BrokerDep, cluster_id: str, topic_name: str, partition_id: str, broker_id: str
) -> Response:
    _accept(request)
    check_cluster(broker, cluster_id)
    info = await call(broker.describe_topic, check_topic_name(topic_name))
    p = _partition_id(partition_id, info)
    state = broker.partition_state(info.name, p)
    replica = next((r for r in state.replicas if str(r) == broker_id), None)
    if replica is None:
        raise HTTPError(
            404, 404, f"Replica {broker_id} of {info.name}-{p} cannot be found.", code="not_found"
        )
    return json_response(replica_data(request, cluster_id, state, replica))


# Produce lives in its own module; its router is served as part of this one so app.py needs no change.

router.include_router(rest_v3_records.router)
