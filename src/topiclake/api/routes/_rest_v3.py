"""What the Kafka REST Proxy v3 route modules share: request helpers and the resource bodies.

:mod:`.rest_v3` (admin), :mod:`.rest_v3_records` (produce) and :mod:`.rest_v3_groups` import from here, so
none of them imports another (the helpers once lived in :mod:`.rest_v3`, which made a cycle with
:mod:`.rest_v3_records`; :mod:`.rest_v3` still re-exports them).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import orjson
from fastapi import Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from topiclake.api.errors import HTTPError
from topiclake.api.http import negotiate, read_body, require_media
from topiclake.platform import Broker, TopicInfo, validate_topic_name
from topiclake.platform.catalog.topic_config import DEFAULTS
from topiclake.platform.cluster import BrokerEndpoint, PartitionState
from topiclake.settings import GatewaySettings

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


def json_object(body: Any, what: str) -> dict[str, Any]:
    """The body as a JSON object, or Confluent's 400."""
    if not isinstance(body, dict):
        raise bad_request(f"the {what} body must be a JSON object, not {type(body).__name__}")
    return body


def int_field(value: Any, field: str) -> int:
    """An integer field of a body (not a bool), or Confluent's 400."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(f"{field} must be an integer, got {value!r}")
    return value


async def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking broker call in the threadpool (unknown topics and partitions answer 40403: see
    errors.V3_OVERRIDES)."""
    return await run_in_threadpool(fn, *args, **kwargs)


def accept_json(request: Request) -> None:
    """406 unless the client accepts JSON."""
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


def topic_body(request: Request, cid: str, info: TopicInfo) -> dict[str, Any]:
    """``KafkaTopic`` of a described topic."""
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


def partition_id(raw: str, info: TopicInfo) -> int:
    """A partition id from a path, or 40403 if the topic has no such partition."""
    if not raw.isdigit() or int(raw) >= info.partitions:
        raise HTTPError(404, 40403, f"topic {info.name} has no partition {raw}", code="partition_not_found")
    return int(raw)
