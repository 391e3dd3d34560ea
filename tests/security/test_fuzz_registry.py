"""Fuzz the schema registry's own OpenAPI (its own app on its own port) with schemathesis, as the gateway's
(test_fuzz_api.py): no 5xx, documented responses conform, rejected requests change no table."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest
import schemathesis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "schema_registry"))

from fuzz_harness import Checker, fuzz_operations
from registry_stack import running_stack

logger = logging.getLogger(__name__)

EXAMPLES = 15


_SCHEMA = '{"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}'


@pytest.mark.slow
def test_every_registry_operation_survives_fuzzing(tmp_path: Path) -> None:
    with running_stack(tmp_path / "wh") as stack:
        import httpx

        registered = httpx.post(
            f"{stack.registry_url}/subjects/orders-value/versions",
            json={"schema": _SCHEMA},
            headers={"content-type": "application/vnd.schemaregistry.v1+json"},
        )
        assert registered.status_code == 200, registered.text
        known = {"subject": "orders-value", "version": "1", "id": registered.json()["id"]}
        schema = schemathesis.openapi.from_url(f"{stack.registry_url}/openapi.json")
        checker = Checker(stack.registry_url, stack.warehouse, known=known)
        operations = fuzz_operations(schema, checker, EXAMPLES)
        assert operations > 20
        logger.warning(
            "registry: fuzzed %d cases over %d operations: statuses %s",
            checker.cases,
            len(checker.operations),
            dict(sorted(checker.statuses.items())),
        )
        assert not checker.problems, "\n".join(checker.problems[:30])
