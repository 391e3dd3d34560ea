"""Fuzz the gateway's whole OpenAPI with schemathesis against a real uvicorn server (issue 13).

Every operation of ``/openapi.json`` gets a bounded, derandomized number of generated cases, valid ones and
invalid ones; then a stateful run follows the schema's OpenAPI links (create topic -> produce -> fetch,
consumer instance -> subscribe -> records -> offsets -> delete, group members) for a bounded number of
steps. Every request: no 5xx, responses conform to the schema where it documents them, and a rejected
request (4xx) changed no Delta table of the warehouse (fuzz_harness.Checker). The counts are logged.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import settings
from hypothesis.errors import FlakyStrategyDefinition

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "api"))

from fuzz_harness import SETTINGS, Checker, fuzz_operations
from gateway_harness import Gateway, start_gateway, stop_gateway

logger = logging.getLogger(__name__)

#: examples per operation and generation mode (positive, negative): the budget of the whole test
EXAMPLES = 8
#: stateful scenarios and steps per scenario
SCENARIOS, STEPS = 60, 10


@pytest.fixture(scope="module")
def fuzz_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, Path]]:
    warehouse = tmp_path_factory.mktemp("fuzz") / "wh"
    # consumer instances never expire during the run: an expiry's commit would be a background write
    overrides = {"consumer_instance_timeout_ms": 3_600_000}
    # topics are not created on first use here: every random topic name a fuzzed produce is given would
    # become a topic (tests/kafka/test_auto_create.py proves auto-creation, and that a 4xx creates nothing)
    gw, server, thread = start_gateway(
        warehouse, settings_overrides=overrides, auto_create_topics_enable=False
    )
    try:
        yield gw, warehouse
    finally:
        stop_gateway(gw, server, thread)


def _schema(gw: Gateway) -> Any:
    return schemathesis.openapi.from_url(f"{gw.url}/openapi.json")


def _existing(gw: Gateway) -> dict[str, Any]:
    """A topic with records, a group with a member and a consumer instance: names for path parameters."""
    assert gw.client.post("/v1/topics", json={"name": "fuzzed", "partitions": 2}).status_code == 201
    produced = gw.client.post("/v1/topics/fuzzed/records", json={"records": [{"value": "v"}] * 4})
    assert produced.status_code == 200
    joined = gw.client.post("/v1/groups/fuzz-group/members", json={"topics": ["fuzzed"]})
    assert joined.status_code == 200, joined.text
    v2 = {"content-type": "application/vnd.kafka.v2+json"}
    instance = gw.client.post("/consumers/fuzz-v2", json={"name": "i1"}, headers=v2)
    assert instance.status_code == 200, instance.text
    cid = gw.client.get("/v3/clusters").json()["data"][0]["cluster_id"]
    return {
        "topic": "fuzzed",
        "topic_name": "fuzzed",
        "partition": 0,
        "partition_id": 0,
        "cluster_id": cid,
        "broker_id": gw.broker.config.broker_id,
        "group": "fuzz-group",
        "member": joined.json()["member_id"],
        "consumer": joined.json()["member_id"],
        "instance": "i1",
    }


@pytest.mark.slow
def test_every_operation_survives_fuzzing(fuzz_gateway: tuple[Gateway, Path]) -> None:
    gw, warehouse = fuzz_gateway
    schema = _schema(gw)
    checker = Checker(gw.url, warehouse, known=_existing(gw))
    operations = fuzz_operations(schema, checker, EXAMPLES)
    assert operations > 70
    logger.warning(
        "fuzzed %d cases over %d operations: statuses %s",
        checker.cases,
        len(checker.operations),
        dict(sorted(checker.statuses.items())),
    )
    assert not checker.problems, "\n".join(checker.problems[:30])


@pytest.mark.slow
def test_stateful_links_reach_the_deep_routes(fuzz_gateway: tuple[Gateway, Path]) -> None:
    gw, warehouse = fuzz_gateway
    schema = _schema(gw)
    checker = Checker(gw.url, warehouse)

    class Machine(schema.as_state_machine()):  # type: ignore[misc]
        def before_call(self, case: schemathesis.Case) -> None:
            if case.operation.label == "POST /consumers/{group}":
                # the instance is what the deep routes' links need: a drawn name repeats (a 409) and drawn
                # settings can be refused (422), feeding no link; the stateless test fuzzes this body
                case.body = {}
            checker.before()

        def call(self, case: schemathesis.Case, **kwargs: Any) -> schemathesis.Response:
            return case.call(base_url=gw.url, timeout=30, **kwargs)

        def after_call(self, response: schemathesis.Response, case: schemathesis.Case) -> None:
            checker.after(case, response)

        def validate_response(
            self, response: schemathesis.Response, case: schemathesis.Case, **kw: Any
        ) -> None:
            checker.validate(case, response)

    try:
        Machine.run(settings=settings(max_examples=SCENARIOS, stateful_step_count=STEPS, **SETTINGS))
    except FlakyStrategyDefinition as exc:
        # Which rules are enabled depends on the server's earlier answers (links fill bundles), and the
        # server keeps its state across scenarios: a scenario can find a bundle empty that an earlier one
        # with the same choices found full, and hypothesis then stops generating. The calls made so far
        # are still checked below, and the deep routes must still have been reached.
        logger.warning("stateful: generation stopped early after %d calls: %s", checker.cases, exc)
    logger.warning(
        "stateful: %d calls over %d operations: statuses %s",
        checker.cases,
        len(checker.operations),
        dict(sorted(checker.statuses.items())),
    )
    assert not checker.problems, "\n".join(checker.problems[:30])
    deep = {op for op in checker.operations if "/instances/{instance}" in op or "/members/{member}" in op}
    logger.warning("stateful reached %s", sorted(deep))
    assert len(deep) >= 4, sorted(checker.operations)
