"""Confluent Kafka REST Proxy v3 admin resources: clusters, brokers, topics, topic configs, partitions.

Shapes, links, status codes and ``{"error_code", "message"}`` bodies follow Confluent's
``api/v3/openapi.yaml`` and its resources. This gateway is one broker of one cluster whose id is
:attr:`Broker.cluster_id`; a request naming another cluster gets Confluent's 404 (``error_code`` 404).
Unknown topics and partitions get Confluent's v3 admin answer, 404 with ``error_code`` 40403 ("This server
does not host this topic-partition"), where the v2 API answers 40401/40402. Produce lives in
:mod:`.rest_v3_records`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import orjson
from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from topiclake import errors as e
from topiclake.api.auth import access_of
from topiclake.api.deps import BrokerDep, SettingsDep
from topiclake.api.errors import HTTPError
from topiclake.api.http import negotiate, read_body, require_media
from topiclake.platform import Broker, TopicConfig, TopicInfo, validate_topic_name
from topiclake.platform.catalog import MAX_PARTITIONS
from topiclake.platform.cluster import BrokerEndpoint, PartitionState
from topiclake.platform.topic_config import CONFIG_NAMES, DEFAULTS
from topiclake.security import Operation
from topiclake.settings import GatewaySettings

router = APIRouter(prefix="/v3", tags=["kafka-rest-v3"])

JSON = "application/json"
T = TypeVar("T")


# ---------------------------------------------------------------------------------------------- helpers


def url(request: Request, *parts: object) -> str:
    """Absolute URL of a v3 resource, as Confluent's ``UrlFactory`` builds it."""
    return "/".join([str(request.base_url).rstrip("/"), "v3", *(str(p) for p in parts)])


def crn(cluster_id: str, *pairs: tuple[str, object]) -> str:
    """Confluent resource name: ``crn:///kafka=<cluster>/topic=<t>/...``."""
    return f"crn:///kafka={cluster_id}" + "".join(f"/{k}={v}" for k, v in pairs)


def check_cluster(broker: Broker, cluster_id: str) -> None:
    """Raise Confluent's 404 for a cluster id that is not this cluster's."""
    if cluster_id != broker.cluster_id:
        raise HTTPError(404, 404, f"Cluster {cluster_id} cannot be found.", code="cluster_not_found")


def check_topic_name(topic: str) -> str:
    """Validate a topic name from a path before it reaches the catalog or storage."""
    return validate_topic_name(topic)


def json_response(body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """A JSON response."""
    return Response(orjson.dumps(body), status_code=status, headers=headers, media_type=JSON)


def bad_request(message: str) -> HTTPError:
    """Confluent's answer to a body it cannot map (Jackson errors): 400 with ``error_code`` 400."""
    return HTTPError(400, 400, message, code="bad_request")


async def json_body(request: Request, settings: GatewaySettings) -> Any:
    """The request's JSON body (415 for another content type, 400 for bad JSON, 413 if too large)."""
    require_media(request, (JSON,))
    raw = await read_body(request, settings.max_request_bytes)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise bad_request(f"Error processing JSON: {exc}") from exc


def _object(body: Any, what: str) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise bad_request(f"the {what} body must be a JSON object, not {type(body).__name__}")
    return body


def _int(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(f"{field} must be an integer, got {value!r}")
    return value


async def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking broker call in the threadpool (unknown topics and partitions answer 40403: see
    errors.V3_OVERRIDES)."""
    return await run_in_threadpool(fn, *args, **kwargs)


def _accept(request: Request) -> None:
    negotiate(request, (JSON,))


def collection(kind: str, self_url: str, data: list[dict[str, Any]]) -> dict[str, Any]:
    """A v3 list body: ``kind``, ``metadata.self`` and ``data``."""
    return {"kind": kind, "metadata": {"self": self_url, "next": None}, "data": data}


# ---------------------------------------------------------------------------------------------- bodies


def cluster_data(request: Request, broker: Broker) -> dict[str, Any]:
    """``KafkaCluster``: the cluster and its related collections."""
    cid = broker.cluster_id
    return {
        "kind": "KafkaCluster",
        "metadata": {"self": url(request, "clusters", cid), "resource_name": crn(cid)},
        "cluster_id": cid,
        "controller": {"related": url(request, "clusters", cid, "brokers", broker.metadata().controller_id)},
        "acls": {"related": url(request, "clusters", cid, "acls")},
        "brokers": {"related": url(request, "clusters", cid, "brokers")},
        "broker_configs": {"related": url(request, "clusters", cid, "broker-configs")},
        "consumer_groups": {"related": url(request, "clusters", cid, "consumer-groups")},
        "topics": {"related": url(request, "clusters", cid, "topics")},
        "partition_reassignments": {
            "related": url(request, "clusters", cid, "topics", "-", "partitions", "-", "reassignment")
        },
    }


def broker_data(request: Request, cid: str, endpoint: BrokerEndpoint) -> dict[str, Any]:
    """``KafkaBroker``: a live broker of the cluster, at its advertised address."""
    bid, host, port = endpoint.broker_id, endpoint.host, endpoint.port
    return {
        "kind": "KafkaBroker",
        "metadata": {
            "self": url(request, "clusters", cid, "brokers", bid),
            "resource_name": crn(cid, ("broker", bid)),
        },
        "cluster_id": cid,
        "broker_id": bid,
        "host": host,
        "port": port,
        "rack": endpoint.rack,
        "configs": {"related": url(request, "clusters", cid, "brokers", bid, "configs")},
        "partition_replicas": {
            "related": url(request, "clusters", cid, "brokers", bid, "partition-replicas")
        },
    }


def topic_data(request: Request, cid: str, name: str, partitions: int, replication: int) -> dict[str, Any]:
    """``KafkaTopic``."""
    return {
        "kind": "KafkaTopic",
        "metadata": {
            "self": url(request, "clusters", cid, "topics", name),
            "resource_name": crn(cid, ("topic", name)),
        },
        "cluster_id": cid,
        "topic_name": name,
        "is_internal": False,
        "replication_factor": replication,
        "partitions_count": partitions,
        "partitions": {"related": url(request, "clusters", cid, "topics", name, "partitions")},
        "configs": {"related": url(request, "clusters", cid, "topics", name, "configs")},
        "partition_reassignments": {
            "related": url(request, "clusters", cid, "topics", name, "partitions", "-", "reassignment")
        },
    }


def _topic(request: Request, cid: str, info: TopicInfo) -> dict[str, Any]:
    return topic_data(request, cid, info.name, info.partitions, info.config.replication_factor)


def config_data(request: Request, cid: str, info: TopicInfo, name: str) -> dict[str, Any]:
    """``KafkaTopicConfig``: value, whether it is the default, and its synonyms (topic override, default)."""
    value = info.config.get(name)
    overridden = name in info.config.overrides()
    synonyms = [{"name": name, "value": value, "source": "DYNAMIC_TOPIC_CONFIG"}] if overridden else []
    synonyms.append({"name": name, "value": DEFAULTS[name], "source": "DEFAULT_CONFIG"})
    t = info.name
    return {
        "kind": "KafkaTopicConfig",
        "metadata": {
            "self": url(request, "clusters", cid, "topics", t, "configs", name),
            "resource_name": crn(cid, ("topic", t), ("config", name)),
        },
        "cluster_id": cid,
        "topic_name": t,
        "name": name,
        "value": value,
        "is_default": not overridden,
        "is_read_only": False,
        "is_sensitive": False,
        "source": "DYNAMIC_TOPIC_CONFIG" if overridden else "DEFAULT_CONFIG",
        "synonyms": synonyms,
    }


def partition_data(request: Request, cid: str, topic: str, partition: int, leader: int) -> dict[str, Any]:
    """``KafkaPartition``: its leader and replicas."""
    base = ("clusters", cid, "topics", topic, "partitions", partition)
    return {
        "kind": "KafkaPartition",
        "metadata": {
            "self": url(request, *base),
            "resource_name": crn(cid, ("topic", topic), ("partition", partition)),
        },
        "cluster_id": cid,
        "topic_name": topic,
        "partition_id": partition,
        "leader": {"related": url(request, *base, "replicas", leader)},
        "replicas": {"related": url(request, *base, "replicas")},
        "reassignment": {"related": url(request, *base, "reassignment")},
    }


def replica_data(request: Request, cid: str, state: PartitionState, broker_id: int) -> dict[str, Any]:
    """``KafkaReplica``: one replica of a partition (leading or not, in sync or not)."""
    topic, partition = state.topic, state.partition
    base = ("clusters", cid, "topics", topic, "partitions", partition, "replicas", broker_id)
    return {
        "kind": "KafkaReplica",
        "metadata": {
            "self": url(request, *base),
            "resource_name": crn(cid, ("topic", topic), ("partition", partition), ("replica", broker_id)),
        },
        "cluster_id": cid,
        "topic_name": topic,
        "partition_id": partition,
        "broker_id": broker_id,
        "is_leader": broker_id == state.leader,
        "is_in_sync": broker_id in state.isr,
        "broker": {"related": url(request, "clusters", cid, "brokers", broker_id)},
    }


def _partition_id(raw: str, info: TopicInfo) -> int:
    if not raw.isdigit() or int(raw) >= info.partitions:
        raise HTTPError(404, 40403, f"topic {info.name} has no partition {raw}", code="partition_not_found")
    return int(raw)


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
from topiclake.api.routes import rest_v3_records  # noqa: E402  (after the helpers it imports from here)

router.include_router(rest_v3_records.router)
