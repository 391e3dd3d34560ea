"""What the schemathesis fuzz tests share: the warehouse's table versions and a per-request checker.

Imported by name (``from fuzz_harness import ...``), like tests/api/gateway_harness.py.

The rule checked on every request: a request the server rejected (4xx) changed no table. The Delta version
of every table in the warehouse (topics and ``_system``) is read from its ``_delta_log`` just before and just
after each request, one request at a time. Accepted writes may commit after their answer (``acks=0``/``1``,
consumer instances), so after an accepted (2xx) non-GET request the checker waits until the versions stop
moving before the next request is sent: whatever changes around a rejected request was done by it.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

#: Hypothesis settings of every fuzz run: the same cases every run, no example database, no deadlines.
SETTINGS: dict[str, Any] = {
    "derandomize": True,
    "database": None,
    "deadline": None,
    "suppress_health_check": list(HealthCheck),
    "phases": [Phase.explicit, Phase.generate],
}

#: the v3 streaming produce: its answer is a stream of JSON objects (Checker.validate)
STREAMING = "POST /v3/clusters/{cluster_id}/topics/{topic_name}/records"

#: the checks every response must pass: no 5xx; documented statuses, media types and bodies
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


#: integers no 64-bit field holds: what found issue 13's 500 (an error body echoing one)
EXTREMES = (-30998723762299437056, 2**64, -(2**63) - 1, 10**30)


def extreme_integers(value: Any, seed: int) -> Any:
    """``value`` with every integer (in JSON bodies and queries) replaced by one of :data:`EXTREMES`.

    Hypothesis rarely draws integers past 64 bits within a small budget; this mutation makes every third
    case carry them, so the bounded run still covers that class of input.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return EXTREMES[seed % len(EXTREMES)]
    if isinstance(value, dict):
        return {k: extreme_integers(v, seed + i) for i, (k, v) in enumerate(value.items())}
    if isinstance(value, list):
        return [extreme_integers(v, seed + i) for i, v in enumerate(value)]
    if isinstance(value, str) and value.lstrip("-").isdigit() and len(value) < 19:
        return str(EXTREMES[seed % len(EXTREMES)])
    return value


def table_versions(root: Path) -> dict[str, int]:
    """Every Delta table under ``root`` (relative path) -> its latest version (from ``_delta_log``)."""
    found: dict[str, int] = {}
    for folder in (root / "topics", root / "_system"):
        if not folder.is_dir():
            continue
        for entry in os.scandir(folder):
            log = Path(entry.path) / "_delta_log"
            if not log.is_dir():
                continue
            versions = [int(n[:-5]) for n in os.listdir(log) if n.endswith(".json") and n[:-5].isdigit()]
            found[f"{folder.name}/{entry.name}"] = max(versions, default=-1)
    return found


def settle(root: Path, timeout_s: float = 3.0) -> dict[str, int]:
    """The table versions once they stop moving (two equal reads 30 ms apart), bounded by ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last = table_versions(root)
    while time.monotonic() < deadline:
        time.sleep(0.03)
        now = table_versions(root)
        if now == last:
            return now
        last = now
    return last


@dataclass
class Checker:
    """Sends fuzzed cases one at a time and keeps what went wrong, with counts for the report."""

    base_url: str
    warehouse: Path
    statuses: Counter[int] = field(default_factory=Counter)
    operations: set[str] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)
    known: dict[str, Any] = field(default_factory=dict)
    _versions: dict[str, int] | None = None

    def before(self) -> None:
        """Snapshot the tables just before a request."""
        self._versions = table_versions(self.warehouse)

    def after(self, case: schemathesis.Case, response: schemathesis.Response) -> None:
        """Count the answer; after a rejection, compare the tables; after an accepted write, settle."""
        assert self._versions is not None
        self.statuses[response.status_code] += 1
        self.operations.add(case.operation.label)
        if 400 <= response.status_code < 500:
            now = table_versions(self.warehouse)
            changed = sorted(
                k for k in now.keys() | self._versions.keys() if now.get(k) != self._versions.get(k)
            )
            if changed:
                self.problems.append(
                    f"{case.operation.label} answered {response.status_code} but changed {changed}: "
                    f"{case.as_curl_command()}"
                )
        elif response.status_code < 300 and case.method.upper() != "GET":
            settle(self.warehouse)

    def run(self, case: schemathesis.Case, **kwargs: Any) -> schemathesis.Response:
        """Send one case, check the tables and the response (failures are kept, not raised).

        Every other case has its path parameters pointed at objects that exist (:attr:`known`), so that
        the fuzzed bodies and queries reach the routes' logic instead of their 404s.
        """
        if self.known and self.cases % 2 == 0 and case.path_parameters and case.method.upper() != "DELETE":
            for name in case.path_parameters:
                if name in self.known:
                    case.path_parameters[name] = self.known[name]
        if self.cases % 3 == 1:
            case.body = extreme_integers(case.body, self.cases)
            if case.query:
                case.query = extreme_integers(case.query, self.cases)
        self.before()
        response = case.call(base_url=self.base_url, timeout=30, **kwargs)
        self.after(case, response)
        self.validate(case, response)
        return response

    def validate(self, case: schemathesis.Case, response: schemathesis.Response) -> None:
        """Run :data:`CHECKS`; a failure is kept with the request that caused it.

        The v3 streaming produce answers one JSON object per record, a line each (Confluent's streaming
        mode), which no OpenAPI media type describes: an answer of several lines has each line checked to
        be a report object instead of the whole being parsed as one JSON document."""
        lines = response.text.splitlines() if case.operation.label == STREAMING else []
        try:
            if len(lines) > 1:
                for line in lines:
                    report = json.loads(line)
                    assert isinstance(report, dict) and "error_code" in report, line[:200]
                return
            case.validate_response(response, checks=CHECKS)
        except (AssertionError, BaseExceptionGroup) as exc:  # a Failure, or schemathesis' FailureGroup
            first = " | ".join(str(exc).strip().splitlines()[:6])
            curl = case.as_curl_command()
            self.problems.append(f"{case.operation.label} -> {response.status_code}: {first} :: {curl}")

    @property
    def cases(self) -> int:
        """How many requests were sent."""
        return sum(self.statuses.values())


#: keys of a parameter's schema that say nothing about its values
_NOTES = frozenset({"title", "description", "example", "examples"})


def can_be_invalid(operation: Any) -> bool:
    """Whether a request to ``operation`` can break its schema: it has a body, a required parameter
    outside the path (which can be left out), or a parameter whose schema says more than "a string".

    A path parameter's value is always a string, so one typed only ``string`` has no invalid value:
    hypothesis would draw ~460 candidates that schemathesis filters out, for nothing (measured: ~1 s per
    such operation, 40 of the gateway's, none sending a request).
    """
    if list(operation.body):
        return True
    for parameter in operation.iter_parameters():
        definition = parameter.definition
        schema = {k: v for k, v in definition.get("schema", {}).items() if k not in _NOTES}
        if schema != {"type": "string"} or (definition.get("in") != "path" and definition.get("required")):
            return True
    return False


def fuzz_operations(schema: Any, checker: Checker, examples: int) -> int:
    """Send ``examples`` valid and ``examples`` invalid cases of every operation of ``schema`` through
    ``checker`` (invalid ones where :func:`can_be_invalid`); return how many operations there were."""
    operations = [result.ok() for result in schema.get_all_operations()]
    for operation in operations:
        modes = [GenerationMode.POSITIVE]
        if can_be_invalid(operation):
            modes.append(GenerationMode.NEGATIVE)
        for mode in modes:

            @settings(max_examples=examples, **SETTINGS)
            @given(case=operation.as_strategy(generation_mode=mode))
            def fuzz(case: schemathesis.Case) -> None:
                checker.run(case)

            try:
                fuzz()
            except Unsatisfiable:  # nothing invalid to generate (an operation without inputs)
                assert mode is GenerationMode.NEGATIVE, operation.label
    return len(operations)
