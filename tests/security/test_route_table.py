"""Every HTTP route is classified for authorization: a row of the route table, open, or checked inside.

A new route that is in none of these would need only an authenticated principal; this test makes adding
one a decision instead of an accident.
"""

from __future__ import annotations

import re

from topiclake.api import create_app
from topiclake.api.auth.route_acls import OPEN_PATHS, needs_for

#: Routes with no row: listings (filtered per principal) and routes whose resources are named in the body
#: (checked in the route through ``Access``), plus metadata, which Kafka serves without an ACL too.
CHECKED_INSIDE_OR_AUTHENTICATED_ONLY = {
    ("GET", "/"),
    ("GET", "/brokers"),
    ("GET", "/topics"),
    ("GET", "/v1/metadata"),
    ("GET", "/v1/topics"),
    ("POST", "/v1/topics"),
    ("POST", "/v1/producers"),
    ("GET", "/v1/groups"),
    ("GET", "/v3/clusters"),
    ("GET", "/v3/clusters/{cluster_id}"),
    ("GET", "/v3/clusters/{cluster_id}/brokers"),
    ("GET", "/v3/clusters/{cluster_id}/brokers/{broker_id}"),
    ("GET", "/v3/clusters/{cluster_id}/topics"),
    ("POST", "/v3/clusters/{cluster_id}/topics"),
    ("GET", "/v3/clusters/{cluster_id}/consumer-groups"),
}


def test_every_route_is_classified() -> None:
    spec = create_app().openapi()
    unlisted = set()
    for path, operations in spec["paths"].items():
        concrete = re.sub(r"\{[^}]+\}", "x", path)
        for method in operations:
            _needs, match = needs_for(method.upper(), concrete)
            if match is None and not OPEN_PATHS.match(concrete):
                unlisted.add((method.upper(), path))
    assert unlisted == CHECKED_INSIDE_OR_AUTHENTICATED_ONLY, (
        "add the new route to api/auth/route_acls.py TABLE, or to this list if its route checks inside: "
        f"{sorted(unlisted ^ CHECKED_INSIDE_OR_AUTHENTICATED_ONLY)}"
    )


def test_table_rows_name_the_resource_they_check() -> None:
    needs, match = needs_for("DELETE", "/v1/groups/g1/instances/i1")
    assert match is not None and [(n.operation.value, n.name(match)) for n in needs] == [("Read", "g1")]
    needs, match = needs_for("GET", "/v1/groups/g1/positions")
    assert match is not None and [(n.operation.value, n.name(match)) for n in needs] == [("Describe", "g1")]
