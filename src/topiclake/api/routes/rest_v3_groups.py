"""Confluent Kafka REST Proxy v3: consumer groups, their consumers and assignments, lags and lag summary.

Shapes follow Confluent's resources (``ConsumerGroupsResource``, ``ConsumersResource``,
``ConsumerAssignmentsResource``, ``ListConsumerLagsResource``/``GetConsumerLagResource``,
``ConsumerGroupLagSummariesResource``): kinds, ``metadata.self`` and ``resource_name``, ``related`` links.
Group states are Confluent's enum names (``STABLE``, ``EMPTY``, ``PREPARING_REBALANCE``,
``COMPLETING_REBALANCE``, ``DEAD``). Lags are listed for the partitions the group has committed offsets for,
``lag = log_end_offset - current_offset``, sorted by lag (largest first), then topic and partition; a group
without committed offsets has no lags and no lag summary (404, as Confluent). An unknown group, consumer,
assignment or lag is Confluent's plain 404 (``error_code`` 404).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.concurrency import run_in_threadpool
from starlette.responses import Response

from topiclake import errors as e
from topiclake.api.auth import access_of
from topiclake.api.consumer_instances import get_groups
from topiclake.api.deps import BrokerDep
from topiclake.api.errors import HTTPError
from topiclake.api.http import negotiate
from topiclake.api.routes._rest_v3 import check_cluster, collection, crn, json_response, url
from topiclake.platform import Broker
from topiclake.security import ResourceType

router = APIRouter(prefix="/v3", tags=["kafka-rest-v3"])

JSON = "application/json"

#: Kafka's group state names -> Confluent's ``ConsumerGroup.State``.
STATES = {
    "Empty": "EMPTY",
    "Stable": "STABLE",
    "PreparingRebalance": "PREPARING_REBALANCE",
    "CompletingRebalance": "COMPLETING_REBALANCE",
    "Dead": "DEAD",
    "Assigning": "ASSIGNING",  # consumer-protocol (KIP-848) groups
    "Reconciling": "RECONCILING",
}


def _not_found(message: str) -> HTTPError:
    return HTTPError(404, 404, message, code="not_found")


def _prepare(request: Request, broker: Broker, cluster_id: str) -> Any:
    negotiate(request, (JSON,))
    check_cluster(broker, cluster_id)
    return get_groups(request)


def _describe(groups: Any, group: str) -> Any:
    try:
        return groups.describe(group)
    except e.GroupNotFound:
        raise _not_found(f"Consumer group {group} could not be found.") from None


# ---------------------------------------------------------------------------------------------- bodies


def group_data(request: Request, cid: str, broker_id: int, group: Any) -> dict[str, Any]:
    """``KafkaConsumerGroup`` from a group listing or description."""
    g = group.group_id
    base = ("clusters", cid, "consumer-groups", g)
    members = group.members if isinstance(group.members, int) else len(group.members)
    return {
        "kind": "KafkaConsumerGroup",
        "metadata": {"self": url(request, *base), "resource_name": crn(cid, ("consumer-group", g))},
        "cluster_id": cid,
        "consumer_group_id": g,
        "is_simple": group.assignor is None and members == 0,
        "partition_assignor": group.assignor or "",
        "state": STATES.get(group.state, "UNKNOWN"),
        "type": "CONSUMER" if getattr(group, "group_type", "") == "consumer" else "CLASSIC",
        "is_mixed_consumer_group": False,
        "coordinator": {"related": url(request, "clusters", cid, "brokers", broker_id)},
        "consumers": {"related": url(request, *base, "consumers")},
        "lag_summary": {"related": url(request, *base, "lag-summary")},
    }


def consumer_data(request: Request, cid: str, group: str, member: Any) -> dict[str, Any]:
    """``KafkaConsumer``: a member of the group."""
    base = ("clusters", cid, "consumer-groups", group, "consumers", member.member_id)
    return {
        "kind": "KafkaConsumer",
        "metadata": {
            "self": url(request, *base),
            "resource_name": crn(cid, ("consumer-group", group), ("consumer", member.member_id)),
        },
        "cluster_id": cid,
        "consumer_group_id": group,
        "consumer_id": member.member_id,
        "instance_id": member.group_instance_id,
        "client_id": member.client_id,
        "assignments": {"related": url(request, *base, "assignments")},
    }


def assignment_data(
    request: Request, cid: str, group: str, member_id: str, topic: str, p: int
) -> dict[str, Any]:
    """``KafkaConsumerAssignment``: one partition a member owns."""
    base = (
        "clusters",
        cid,
        "consumer-groups",
        group,
        "consumers",
        member_id,
        "assignments",
        topic,
        "partitions",
        p,
    )
    return {
        "kind": "KafkaConsumerAssignment",
        "metadata": {
            "self": url(request, *base),
            "resource_name": crn(
                cid,
                ("consumer-group", group),
                ("consumer", member_id),
                ("assignment", topic),
                ("partition", p),
            ),
        },
        "cluster_id": cid,
        "consumer_group_id": group,
        "consumer_id": member_id,
        "topic_name": topic,
        "partition_id": p,
        "partition": {"related": url(request, "clusters", cid, "topics", topic, "partitions", p)},
        "lag": {
            "related": url(request, "clusters", cid, "consumer-groups", group, "lags", topic, "partitions", p)
        },
    }


def lag_data(request: Request, cid: str, group: str, lag: Any, members: dict[str, Any]) -> dict[str, Any]:
    """``KafkaConsumerLag`` of one partition (self link and resource name as GetConsumerLagResource)."""
    member = members.get(lag.member_id) if lag.member_id else None
    return {
        "kind": "KafkaConsumerLag",
        "metadata": {
            "self": url(
                request, "clusters", cid, "topics", lag.topic, "partitions", lag.partition, "lags", group
            ),
            "resource_name": crn(cid, ("topic", lag.topic), ("partition", lag.partition), ("lag", group)),
        },
        "cluster_id": cid,
        "consumer_group_id": group,
        "topic_name": lag.topic,
        "partition_id": lag.partition,
        "current_offset": lag.committed_offset,
        "log_end_offset": lag.end_offset,
        "lag": lag.lag,
        "consumer_id": lag.member_id or "",
        "instance_id": member.group_instance_id if member is not None else None,
        "client_id": member.client_id if member is not None else "",
    }


def _lags(groups: Any, group: str) -> tuple[list[Any], dict[str, Any]]:
    """Committed lags of a group, sorted as Confluent sorts them, and its members by id."""
    description = _describe(groups, group)
    members = {m.member_id: m for m in description.members}
    lags = [lag for lag in groups.lag(group) if lag.committed_offset is not None]
    lags.sort(key=lambda lag: (-lag.lag, lag.topic, lag.partition))
    return lags, members


# ---------------------------------------------------------------------------------------------- routes


@router.get("/clusters/{cluster_id}/consumer-groups", summary="List consumer groups")
def list_groups(request: Request, broker: BrokerDep, cluster_id: str) -> Response:
    groups = _prepare(request, broker, cluster_id)
    listing = sorted(groups.list_groups(), key=lambda g: g.group_id)
    listing = access_of(request.scope).visible(listing, lambda g: g.group_id, ResourceType.GROUP)
    data = [group_data(request, cluster_id, broker.config.broker_id, g) for g in listing]
    self_url = url(request, "clusters", cluster_id, "consumer-groups")
    return json_response(collection("KafkaConsumerGroupList", self_url, data))


@router.get("/clusters/{cluster_id}/consumer-groups/{group}", summary="Get a consumer group")
def get_group(request: Request, broker: BrokerDep, cluster_id: str, group: str) -> Response:
    groups = _prepare(request, broker, cluster_id)
    return json_response(group_data(request, cluster_id, broker.config.broker_id, _describe(groups, group)))


@router.get(
    "/clusters/{cluster_id}/consumer-groups/{group}/consumers", summary="List the consumers of a group"
)
def list_consumers(request: Request, broker: BrokerDep, cluster_id: str, group: str) -> Response:
    groups = _prepare(request, broker, cluster_id)
    members = sorted(_describe(groups, group).members, key=lambda m: m.member_id)
    data = [consumer_data(request, cluster_id, group, m) for m in members]
    self_url = url(request, "clusters", cluster_id, "consumer-groups", group, "consumers")
    return json_response(collection("KafkaConsumerList", self_url, data))


def _member(groups: Any, group: str, consumer: str) -> Any:
    for m in _describe(groups, group).members:
        if m.member_id == consumer:
            return m
    raise _not_found(f"Consumer {consumer} could not be found in consumer group {group}.")


@router.get("/clusters/{cluster_id}/consumer-groups/{group}/consumers/{consumer}", summary="Get a consumer")
def get_consumer(request: Request, broker: BrokerDep, cluster_id: str, group: str, consumer: str) -> Response:
    groups = _prepare(request, broker, cluster_id)
    return json_response(consumer_data(request, cluster_id, group, _member(groups, group, consumer)))


@router.get(
    "/clusters/{cluster_id}/consumer-groups/{group}/consumers/{consumer}/assignments",
    summary="List the partitions a consumer owns",
)
def list_assignments(
    request: Request, broker: BrokerDep, cluster_id: str, group: str, consumer: str
) -> Response:
    groups = _prepare(request, broker, cluster_id)
    member = _member(groups, group, consumer)
    data = [assignment_data(request, cluster_id, group, consumer, t, p) for t, p in sorted(member.assignment)]
    self_url = url(
        request, "clusters", cluster_id, "consumer-groups", group, "consumers", consumer, "assignments"
    )
    return json_response(collection("KafkaConsumerAssignmentList", self_url, data))


@router.get(
    "/clusters/{cluster_id}/consumer-groups/{group}/consumers/{consumer}/assignments/{topic}/partitions/{partition}",
    summary="Get one partition a consumer owns",
)
def get_assignment(
    request: Request,
    broker: BrokerDep,
    cluster_id: str,
    group: str,
    consumer: str,
    topic: str,
    partition: str,
) -> Response:
    groups = _prepare(request, broker, cluster_id)
    member = _member(groups, group, consumer)
    for t, p in member.assignment:
        if t == topic and str(p) == partition:
            return json_response(assignment_data(request, cluster_id, group, consumer, t, p))
    raise _not_found(f"Consumer {consumer} of group {group} is not assigned {topic}-{partition}.")


@router.get(
    "/clusters/{cluster_id}/consumer-groups/{group}/lags", summary="List a group's lags, largest first"
)
async def list_lags(request: Request, broker: BrokerDep, cluster_id: str, group: str) -> Response:
    groups = _prepare(request, broker, cluster_id)
    lags, members = await run_in_threadpool(_lags, groups, group)
    if not lags:
        raise _not_found("Consumer lags not found.")
    data = [lag_data(request, cluster_id, group, lag, members) for lag in lags]
    self_url = url(request, "clusters", cluster_id, "consumer-groups", group, "lags")
    return json_response(collection("KafkaConsumerLagList", self_url, data))


async def _one_lag(
    request: Request, broker: Broker, cluster_id: str, group: str, topic: str, partition: str
) -> Response:
    groups = _prepare(request, broker, cluster_id)
    lags, members = await run_in_threadpool(_lags, groups, group)
    for lag in lags:
        if lag.topic == topic and str(lag.partition) == partition:
            return json_response(lag_data(request, cluster_id, group, lag, members))
    raise _not_found(f"Consumer group {group} has no lag for {topic}-{partition}.")


@router.get(
    "/clusters/{cluster_id}/consumer-groups/{group}/lags/{topic}/partitions/{partition}",
    summary="Get a group's lag on one partition",
)
async def get_lag(
    request: Request, broker: BrokerDep, cluster_id: str, group: str, topic: str, partition: str
) -> Response:
    return await _one_lag(request, broker, cluster_id, group, topic, partition)


@router.get(
    "/clusters/{cluster_id}/topics/{topic}/partitions/{partition}/lags/{group}",
    summary="Get a group's lag on one partition (the path of the lag's self link)",
)
async def get_partition_lag(
    request: Request, broker: BrokerDep, cluster_id: str, topic: str, partition: str, group: str
) -> Response:
    return await _one_lag(request, broker, cluster_id, group, topic, partition)


@router.get(
    "/clusters/{cluster_id}/consumer-groups/{group}/lag-summary", summary="A group's max and total lag"
)
async def get_lag_summary(request: Request, broker: BrokerDep, cluster_id: str, group: str) -> Response:
    groups = _prepare(request, broker, cluster_id)
    lags, members = await run_in_threadpool(_lags, groups, group)
    if not lags:
        raise _not_found(f"Consumer group {group} has no committed offsets, so no lag.")
    top = lags[0]
    member = members.get(top.member_id) if top.member_id else None
    base = ("clusters", cluster_id, "consumer-groups", group)
    max_consumer = top.member_id or ""
    return json_response(
        {
            "kind": "KafkaConsumerGroupLagSummary",
            "metadata": {
                "self": url(request, *base, "lag-summary"),
                "resource_name": crn(cluster_id, ("consumer-group", group)) + "/lag-summary",
            },
            "cluster_id": cluster_id,
            "consumer_group_id": group,
            "max_lag_consumer_id": max_consumer,
            "max_lag_instance_id": member.group_instance_id if member is not None else None,
            "max_lag_client_id": member.client_id if member is not None else "",
            "max_lag_topic_name": top.topic,
            "max_lag_partition_id": top.partition,
            "max_lag": top.lag,
            "total_lag": sum(lag.lag for lag in lags),
            "max_lag_consumer": {"related": url(request, *base, "consumers", max_consumer)},
            "max_lag_partition": {
                "related": url(
                    request, "clusters", cluster_id, "topics", top.topic, "partitions", top.partition
                )
            },
        }
    )
