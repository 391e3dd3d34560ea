"""ACL checks of the transaction APIs, Kafka's way (``KafkaApis``): Write on the TransactionalId for
InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn, TxnOffsetCommit, EndTxn and a transactional Produce;
Describe on it for FindCoordinator (key type 1) and DescribeTransactions; ListTransactions lists only the
ids the principal may Describe. The topics of AddPartitionsToTxn need Write, the group of AddOffsetsToTxn
and TxnOffsetCommit Read (topic checks of Produce and TxnOffsetCommit stay :mod:`.authz`'s)."""

from __future__ import annotations

from typing import Any

from topiclake.kafka import errors as kerr
from topiclake.kafka.codec import Request
from topiclake.kafka.context import Context
from topiclake.security import Operation, ResourceType

X, T, G = ResourceType.TRANSACTIONAL_ID, ResourceType.TOPIC, ResourceType.GROUP
_FAIL = kerr.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

#: The API keys this module gates (Produce and InitProducerId only with a transactional id).
KEYS = frozenset({0, 10, 22, 24, 25, 26, 28, 65})


def _may(ctx: Context, req: Request, op: Operation, rtype: ResourceType, name: str) -> bool:
    conn = req.connection
    return bool(ctx.security.authorizer.authorize(conn.principal, conn.host, op, rtype, name))


def _partitions_refused(b: Any, code: int, denied: set[str] | None = None) -> dict[str, Any]:
    def one(topic: str) -> int:
        if denied is None:
            return code
        return kerr.TOPIC_AUTHORIZATION_FAILED if topic in denied else kerr.OPERATION_NOT_ATTEMPTED

    return {
        "results_by_topic_v3_and_below": [
            {
                "name": t.name,
                "results_by_partition": [
                    {"partition_index": p, "partition_error_code": one(str(t.name))} for p in t.partitions
                ],
            }
            for t in b.v3_and_below_topics
        ]
    }


def refused(ctx: Context, req: Request) -> dict[str, Any] | None:
    """The answer of a transaction request the ACLs refuse as a whole (None: go on)."""
    b = req.body
    key = req.api_key
    if key == 0:
        tid = b.transactional_id
        if tid is None or _may(ctx, req, Operation.WRITE, X, str(tid)):
            return None
        return {
            "responses": [
                {
                    "name": t.name,
                    "partition_responses": [
                        {"index": p.index, "error_code": _FAIL} for p in t.partition_data
                    ],
                }
                for t in b.topic_data
            ]
        }
    if key == 10:
        if int(getattr(b, "key_type", 0)) != 1 or _may(ctx, req, Operation.DESCRIBE, X, str(b.key)):
            return None
        return {"error_code": _FAIL, "node_id": -1, "host": "", "port": -1}
    if key == 22:
        if b.transactional_id is None or _may(ctx, req, Operation.WRITE, X, str(b.transactional_id)):
            return None
        return {"error_code": _FAIL, "producer_id": -1, "producer_epoch": -1}
    if key == 65:
        return None  # per id, in :func:`filter_answer`
    tid = str(b.v3_and_below_transactional_id if key == 24 else b.transactional_id)
    if not _may(ctx, req, Operation.WRITE, X, tid):
        if key == 24:
            return _partitions_refused(b, _FAIL)
        if key == 28:
            return _offsets_refused(b, _FAIL)
        return {"error_code": _FAIL}
    if key == 24:
        denied = {
            str(t.name) for t in b.v3_and_below_topics if not _may(ctx, req, Operation.WRITE, T, str(t.name))
        }
        return _partitions_refused(b, 0, denied) if denied else None
    if key in (25, 28) and not _may(ctx, req, Operation.READ, G, str(b.group_id)):
        code = kerr.GROUP_AUTHORIZATION_FAILED
        return {"error_code": code} if key == 25 else _offsets_refused(b, code)
    return None


def _offsets_refused(b: Any, code: int) -> dict[str, Any]:
    return {
        "topics": [
            {
                "name": t.name,
                "partitions": [
                    {"partition_index": p.partition_index, "error_code": code} for p in t.partitions
                ],
            }
            for t in b.topics
        ]
    }


def filter_answer(ctx: Context, req: Request, out: dict[str, Any]) -> dict[str, Any]:
    """DescribeTransactions: ids the principal may not Describe are refused; ListTransactions: left out."""
    if req.api_key == 65:
        for state in out.get("transaction_states", []):
            if not _may(ctx, req, Operation.DESCRIBE, X, str(state["transactional_id"])):
                state.update(
                    error_code=_FAIL, transaction_state="", producer_id=-1, producer_epoch=-1, topics=[]
                )
    elif req.api_key == 66:
        out["transaction_states"] = [
            s
            for s in out.get("transaction_states", [])
            if _may(ctx, req, Operation.DESCRIBE, X, str(s["transactional_id"]))
        ]
    return out


def markers_refused(b: Any, code: int) -> dict[str, Any]:
    """A WriteTxnMarkers answer refusing every partition with ``code`` (it needs ClusterAction)."""
    return {
        "markers": [
            {
                "producer_id": m.producer_id,
                "topics": [
                    {
                        "name": t.name,
                        "partitions": [
                            {"partition_index": p, "error_code": code} for p in t.partition_indexes
                        ],
                    }
                    for t in m.topics
                ],
            }
            for m in b.markers
        ]
    }
