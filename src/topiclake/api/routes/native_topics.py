"""Native API: topics admin, metadata, offsets and producer ids (``/v1``)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from topiclake.api.auth import AccessDep
from topiclake.api.deps import BrokerDep
from topiclake.platform import Broker, TopicInfo

router = APIRouter(prefix="/v1", tags=["topics"])


class TopicCreate(BaseModel):
    """A topic to create."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [{"name": "orders", "partitions": 3, "configs": {"retention.ms": "86400000"}}]
        },
    )

    name: str = Field(description="Kafka topic name: [a-zA-Z0-9._-], 1-249 characters.")
    partitions: int = Field(1, description="Number of partitions (can only grow later).")
    configs: dict[str, str | int] = Field(default_factory=dict, description="Kafka topic configs.")
    replication_factor: int | None = Field(
        None,
        ge=1,
        le=1_000,
        description="Brokers that may lead each partition (default: the cluster's default replication "
        "factor, capped at the live brokers). Same as the config replication.factor.",
    )


class ConfigChange(BaseModel):
    """Configs to set and configs to reset to their defaults."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"set": {"retention.ms": "3600000"}, "delete": ["cleanup.policy"]}]},
    )

    set: dict[str, str | int] = Field(default_factory=dict)
    delete: list[str] = Field(default_factory=list)


class PartitionGrowth(BaseModel):
    """The new partition count of a topic (larger than the current one)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"count": 6}]})

    count: int


def topic_body(info: TopicInfo, broker: Broker | None = None) -> dict[str, Any]:
    """The native JSON shape of a topic (with partition offsets when a broker is given)."""
    body: dict[str, Any] = {
        "name": info.name,
        "topic_id": info.topic_id,
        "partitions": info.partitions,
        "configs": info.config.to_kafka(),
        "created_ms": info.created_ms,
        "updated_ms": info.updated_ms,
    }
    if broker is not None:
        body["offsets"] = [
            {
                "partition": p,
                "beginning_offset": broker.list_offsets(info.name, p, "earliest"),
                "end_offset": broker.list_offsets(info.name, p, "latest"),
            }
            for p in range(info.partitions)
        ]
    return body


@router.get("/metadata", summary="Cluster metadata: brokers and the leader of every partition")
def metadata(broker: BrokerDep, access: AccessDep) -> dict[str, Any]:
    """What a client needs to find every partition's leader from any broker ("bootstrap")."""
    meta = broker.metadata()
    topics = access.visible(sorted(meta.partitions.items()), lambda item: item[0])
    return {
        "cluster_id": meta.cluster_id,
        "controller_id": meta.controller_id,
        "brokers": [
            {
                "id": b.broker_id,
                "host": b.host,
                "port": b.port,
                "rack": b.rack,
                "listeners": {e.name: f"{e.host}:{e.port}" for e in b.listeners},
            }
            for b in meta.brokers
        ],
        "topics": [
            {
                "name": name,
                "partitions": [
                    {
                        "partition": s.partition,
                        "leader": s.leader,
                        "leader_epoch": s.leader_epoch,
                        "replicas": list(s.replicas),
                        "in_sync_replicas": list(s.isr),
                    }
                    for s in states
                ],
            }
            for name, states in topics
        ],
    }


@router.get("/topics", summary="List topics")
def list_topics(broker: BrokerDep, access: AccessDep) -> dict[str, Any]:
    return {"topics": [topic_body(t) for t in access.visible(broker.list_topics(), lambda t: t.name)]}


@router.post("/topics", status_code=201, summary="Create a topic (and its Delta table)")
def create_topic(body: TopicCreate, broker: BrokerDep, access: AccessDep) -> dict[str, Any]:
    access.require_create(body.name)
    configs = dict(body.configs)
    if body.replication_factor is not None:
        configs["replication.factor"] = body.replication_factor
    info = broker.create_topic(body.name, body.partitions, configs)
    return topic_body(info, broker)


@router.get("/topics/{topic}", summary="Describe a topic, with both ends of every partition")
def describe_topic(topic: str, broker: BrokerDep) -> dict[str, Any]:
    return topic_body(broker.describe_topic(topic), broker)


@router.patch("/topics/{topic}/configs", summary="Set or reset topic configs")
def alter_configs(topic: str, body: ConfigChange, broker: BrokerDep) -> dict[str, Any]:
    return topic_body(broker.alter_topic_configs(topic, body.set, body.delete))


@router.post("/topics/{topic}/partitions", summary="Increase the number of partitions (never decrease)")
def increase_partitions(topic: str, body: PartitionGrowth, broker: BrokerDep) -> dict[str, Any]:
    return topic_body(broker.increase_partitions(topic, body.count), broker)


@router.delete("/topics/{topic}", status_code=204, summary="Delete a topic and its data")
def delete_topic(topic: str, broker: BrokerDep) -> Response:
    broker.delete_topic(topic)
    return Response(status_code=204)


@router.get("/topics/{topic}/partitions", summary="Partitions with leader and offsets")
def list_partitions(topic: str, broker: BrokerDep) -> dict[str, Any]:
    info = broker.describe_topic(topic)
    states = [broker.partition_state(topic, p) for p in range(info.partitions)]
    return {
        "topic": topic,
        "partitions": [
            {
                "partition": p,
                "leader": states[p].leader,
                "leader_epoch": states[p].leader_epoch,
                "replicas": list(states[p].replicas),
                "in_sync_replicas": list(states[p].isr),
                "beginning_offset": broker.list_offsets(topic, p, "earliest"),
                "end_offset": broker.list_offsets(topic, p, "latest"),
            }
            for p in range(info.partitions)
        ],
    }


@router.get("/topics/{topic}/partitions/{partition}/offsets", summary="Earliest, latest, and by timestamp")
def offsets(
    topic: str,
    partition: int,
    broker: BrokerDep,
    timestamp: int | None = Query(None, description="Also find the first offset at or after this time (ms)."),
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "topic": topic,
        "partition": partition,
        "beginning_offset": broker.list_offsets(topic, partition, "earliest"),
        "end_offset": broker.list_offsets(topic, partition, "latest"),
        "timestamp": timestamp,
        "timestamp_offset": None if timestamp is None else broker.list_offsets(topic, partition, timestamp),
    }
    return body


@router.post("/producers", tags=["produce"], summary="A new idempotent producer id")
def init_producer(broker: BrokerDep, access: AccessDep) -> dict[str, int]:
    """Send ``producer: {id, epoch, sequence}`` with produce requests; record ``i`` of a request has
    sequence ``sequence + i`` and the next request continues after the last. A retry with the same
    sequence is answered with the original offsets and not written again."""
    access.require_idempotent_write()
    info = broker.init_producer()
    return {"producer_id": info.producer_id, "epoch": info.epoch}
