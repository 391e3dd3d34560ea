"""Fuzz the schema registry's own OpenAPI (its own app on its own port) with schemathesis, as the gateway's
(test_fuzz_api.py): no 5xx, documented responses conform, rejected requests change no table."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "schema_registry"))

from fuzz_harness import Checker
from registry_stack import running_stack

logger = logging.getLogger(__name__)

EXAMPLES = 15

_SETTINGS: dict[str, Any] = {
    "derandomize": True,
    "database": None,
    "deadline": None,
    "suppress_health_check": list(HealthCheck),
    "phases": [Phase.explicit, Phase.generate],
}

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
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) > 20
        for operation in operations:
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

                @settings(max_examples=EXAMPLES, **_SETTINGS)
                @given(case=operation.as_strategy(generation_mode=mode))
                def fuzz(case: schemathesis.Case) -> None:
                    checker.run(case)

                try:
                    fuzz()
                except Unsatisfiable:
                    assert mode is GenerationMode.NEGATIVE, operation.label
        logger.warning(
            "registry: fuzzed %d cases over %d operations: statuses %s",
            checker.cases,
            len(checker.operations),
            dict(sorted(checker.statuses.items())),
        )
        assert not checker.problems, "\n".join(checker.problems[:30])
