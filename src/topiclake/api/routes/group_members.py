"""Start positions of a group's consumers, and static members leaving by ``group.instance.id``.

- ``GET /v1/groups/{group}/positions?topic=T[&partition=P][&reset=earliest|latest|none][&timestamp=MS]``:
  where a member of the group starts reading each partition -- the committed offset when it is inside the
  log, else the ``auto.offset.reset`` (``earliest``, ``latest``; ``none``: 416 ``no_offset_for_partition``
  or ``offset_out_of_range``), or with ``timestamp`` the first offset at or after that time (the end when
  there is none). Each position says where it came from (``committed``, ``earliest``, ``latest``,
  ``timestamp``). Nothing is committed.
- ``DELETE /v1/groups/{group}/instances/{instance_id}``: the static member with that ``group.instance.id``
  leaves at once (Kafka's LeaveGroup with members by instance id, as ``AdminClient
  .removeMembersFromConsumerGroup`` sends); the others rebalance. 204; 404 ``unknown_member_id``.
- REST Proxy v3 (topiclake additions beside Confluent's read-only consumer resources):
  ``DELETE /v3/clusters/{c}/consumer-groups/{g}/consumers/{consumer_id}`` (a member by id) and
  ``DELETE /v3/clusters/{c}/consumer-groups/{g}/instances/{instance_id}`` (a static member): 204, or
  Confluent's plain 404.

In a cluster these paths are forwarded to the group's coordinator like every other group route.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from topiclake import errors as e
from topiclake.api.consumer_instances import get_groups
from topiclake.api.deps import BrokerDep
from topiclake.api.errors import HTTPError
from topiclake.api.routes.native_groups import GroupsDep
from topiclake.api.routes.rest_v3 import check_cluster
from topiclake.platform import Broker, GroupCoordinator

router = APIRouter(tags=["groups"])

Reset = Literal["earliest", "latest", "none"]


def start_position(
    broker: Broker,
    groups: GroupCoordinator,
    group: str,
    topic: str,
    partition: int,
    reset: Reset,
    timestamp_ms: int | None,
) -> tuple[int, str]:
    """(offset, where it came from) at which a member of ``group`` starts reading the partition."""
    try:
        return groups.resolve_position(group, topic, partition, "none"), "committed"
    except e.OffsetOutOfRange:  # also NoOffsetForPartition: nothing committed
        if timestamp_ms is None and reset == "none":
            raise
    if timestamp_ms is not None:
        found = broker.list_offsets(topic, partition, timestamp_ms)
        end = broker.list_offsets(topic, partition, "latest")
        return (found if found is not None else int(end or 0)), "timestamp"
    spec: Literal["earliest", "latest"] = "earliest" if reset == "earliest" else "latest"
    return int(broker.list_offsets(topic, partition, spec) or 0), spec


@router.get("/v1/groups/{group}/positions", summary="Where the group's consumers start reading")
def positions(
    group: str,
    broker: BrokerDep,
    groups: GroupsDep,
    topic: Annotated[str, Query(description="The topic.")],
    partition: Annotated[int | None, Query(ge=0, description="Only this partition (default: all).")] = None,
    reset: Annotated[Reset, Query(description="auto.offset.reset without a usable commit.")] = "latest",
    timestamp: Annotated[
        int | None,
        Query(
            ge=0, description="Without a usable commit, start at the first offset at/after this time (ms)."
        ),
    ] = None,
) -> dict[str, Any]:
    count = broker.describe_topic(topic).partitions
    if partition is not None and partition >= count:
        raise e.PartitionNotFound(
            f"topic {topic} has no partition {partition} (it has {count})", topic=topic, partition=partition
        )
    out = []
    for p in [partition] if partition is not None else range(count):
        offset, source = start_position(broker, groups, group, topic, p, reset, timestamp)
        out.append({"topic": topic, "partition": p, "offset": offset, "source": source})
    return {"group": group, "positions": out}


@router.delete(
    "/v1/groups/{group}/instances/{instance_id}",
    status_code=204,
    summary="A static member (group.instance.id) leaves the group",
)
def leave_instance(group: str, instance_id: str, groups: GroupsDep) -> Response:
    groups.leave(group, group_instance_id=instance_id)
    return Response(status_code=204)


def _v3_leave(request: Request, broker: Broker, cluster_id: str, group: str, **who: str) -> Response:
    check_cluster(broker, cluster_id)
    try:
        get_groups(request).leave(group, **who)
    except (e.GroupNotFound, e.UnknownMemberId) as exc:
        raise HTTPError(404, 404, exc.message, code="not_found") from None
    return Response(status_code=204)


@router.delete(
    "/v3/clusters/{cluster_id}/consumer-groups/{group}/consumers/{consumer_id}",
    status_code=204,
    tags=["kafka-rest-v3"],
    summary="Remove a consumer from its group (topiclake addition)",
)
def v3_remove_consumer(
    request: Request, broker: BrokerDep, cluster_id: str, group: str, consumer_id: str
) -> Response:
    return _v3_leave(request, broker, cluster_id, group, member_id=consumer_id)


@router.delete(
    "/v3/clusters/{cluster_id}/consumer-groups/{group}/instances/{instance_id}",
    status_code=204,
    tags=["kafka-rest-v3"],
    summary="Remove a static member by group.instance.id (topiclake addition)",
)
def v3_remove_instance(
    request: Request, broker: BrokerDep, cluster_id: str, group: str, instance_id: str
) -> Response:
    return _v3_leave(request, broker, cluster_id, group, group_instance_id=instance_id)
