"""The one table from HTTP route to what Kafka would check: operation and resource per route.

The authentication middleware matches each request's method and path here before any route runs (so the
fast produce path, which answers below FastAPI, is covered too) and answers 403 when a check fails.
Routes whose resources are in the body (create topic, commit offsets of many topics, subscriptions) or
that list resources (filtered, never 403) check those themselves through :class:`~.access.Access`.

A route not in the table needs only an authenticated principal (``/v1/metadata``, ``/brokers``,
``/v3/clusters``: Kafka's Metadata needs no ACL either, the topics in them are filtered).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

from topiclake.security.acl import CLUSTER_NAME, Operation, ResourceType

R = Operation


@dataclass(frozen=True)
class Need:
    """One check: ``operation`` on the resource named by a path parameter (or the cluster)."""

    operation: Operation
    resource_type: ResourceType
    param: str | None = None  # the path parameter holding the name; None = the cluster

    def name(self, match: re.Match[str]) -> str:
        """The resource name this check is about, for one matched path."""
        return CLUSTER_NAME if self.param is None else unquote(match.group(self.param))


def topic(op: Operation, param: str = "topic") -> Need:
    """``op`` on the topic named by path parameter ``param``."""
    return Need(op, ResourceType.TOPIC, param)


def group(op: Operation, param: str = "group") -> Need:
    """``op`` on the group named by path parameter ``param``."""
    return Need(op, ResourceType.GROUP, param)


def cluster(op: Operation) -> Need:
    """``op`` on the cluster."""
    return Need(op, ResourceType.CLUSTER)


_SEG = r"[^/]+"
_V3 = rf"/v3/clusters/{_SEG}"
_V2C = r"/consumers/(?P<group>[^/]+)/instances/[^/]+"


def _p(pattern: str) -> re.Pattern[str]:
    return re.compile("^" + pattern.replace("{", "(?P<").replace("}", ">[^/]+)") + "/?$")


#: (method, path pattern, needs); the first row that matches decides. ``{x}`` is one path segment.
TABLE: list[tuple[str, re.Pattern[str], tuple[Need, ...]]] = [
    # -- native /v1 -------------------------------------------------------------------------------------
    ("GET", _p("/v1/topics/{topic}"), (topic(R.DESCRIBE),)),
    ("PATCH", _p("/v1/topics/{topic}/configs"), (topic(R.ALTER_CONFIGS),)),
    ("POST", _p("/v1/topics/{topic}/partitions"), (topic(R.ALTER),)),
    ("DELETE", _p("/v1/topics/{topic}"), (topic(R.DELETE),)),
    ("GET", _p("/v1/topics/{topic}/partitions"), (topic(R.DESCRIBE),)),
    ("GET", _p("/v1/topics/{topic}/partitions/{p}/offsets"), (topic(R.DESCRIBE),)),
    ("POST", _p("/v1/topics/{topic}/records"), (topic(R.WRITE),)),
    ("GET", _p("/v1/topics/{topic}/partitions/{p}/records"), (topic(R.READ),)),
    ("GET", _p("/v1/groups/{group}"), (group(R.DESCRIBE),)),
    ("DELETE", _p("/v1/groups/{group}"), (group(R.DELETE),)),
    ("POST", _p("/v1/groups/{group}/members"), (group(R.READ),)),
    ("POST", _p("/v1/groups/{group}/members/{m}/heartbeat"), (group(R.READ),)),
    ("DELETE", _p("/v1/groups/{group}/members/{m}"), (group(R.READ),)),
    ("POST", _p("/v1/groups/{group}/offsets"), (group(R.READ),)),  # + Read on each topic (route)
    ("POST", _p("/v1/groups/{group}/offsets/reset"), (group(R.READ),)),  # + Read on each topic (route)
    ("GET", _p("/v1/groups/{group}/offsets"), (group(R.DESCRIBE),)),
    ("GET", _p("/v1/groups/{group}/lag"), (group(R.DESCRIBE),)),
    ("GET", _p("/v1/groups/{group}/positions"), (group(R.DESCRIBE),)),
    ("DELETE", _p("/v1/groups/{group}/instances/{i}"), (group(R.READ),)),  # LeaveGroup
    # -- REST Proxy v2 ----------------------------------------------------------------------------------
    ("GET", _p("/topics/{topic}"), (topic(R.DESCRIBE), topic(R.DESCRIBE_CONFIGS))),
    ("GET", _p("/topics/{topic}/partitions"), (topic(R.DESCRIBE),)),
    ("GET", _p("/topics/{topic}/partitions/{p}"), (topic(R.DESCRIBE),)),
    ("GET", _p("/topics/{topic}/partitions/{p}/offsets"), (topic(R.DESCRIBE),)),
    ("POST", _p("/topics/{topic}"), (topic(R.WRITE),)),
    ("POST", _p("/topics/{topic}/partitions/{p}"), (topic(R.WRITE),)),
    ("POST", _p("/consumers/{group}"), (group(R.READ),)),
    ("GET", re.compile(f"^{_V2C}/records/?$"), (group(R.READ),)),  # + Read on each assigned topic (route)
    ("*", re.compile(f"^{_V2C}(/.*)?$"), (group(R.READ),)),  # + Read on each topic named (route)
    # -- REST Proxy v3 ----------------------------------------------------------------------------------
    ("GET", _p(_V3 + "/topics/-/configs"), ()),  # filtered by DescribeConfigs (route)
    ("GET", _p(_V3 + "/topics/{topic}"), (topic(R.DESCRIBE),)),
    ("PATCH", _p(_V3 + "/topics/{topic}"), (topic(R.ALTER),)),
    ("DELETE", _p(_V3 + "/topics/{topic}"), (topic(R.DELETE),)),
    ("GET", re.compile(rf"^{_V3}/topics/(?P<topic>[^/]+)/configs(/[^/]+)?/?$"), (topic(R.DESCRIBE_CONFIGS),)),
    ("POST", _p(_V3 + "/topics/{topic}/configs:alter"), (topic(R.ALTER_CONFIGS),)),
    ("PUT", _p(_V3 + "/topics/{topic}/configs/{name}"), (topic(R.ALTER_CONFIGS),)),
    ("DELETE", _p(_V3 + "/topics/{topic}/configs/{name}"), (topic(R.ALTER_CONFIGS),)),
    (
        "GET",
        re.compile(rf"^{_V3}/topics/(?P<topic>[^/]+)/partitions/[^/]+/lags/(?P<group>[^/]+)/?$"),
        (topic(R.DESCRIBE), group(R.DESCRIBE)),
    ),
    ("GET", re.compile(rf"^{_V3}/topics/(?P<topic>[^/]+)/partitions(/.*)?$"), (topic(R.DESCRIBE),)),
    ("POST", re.compile(rf"^{_V3}/topics/(?P<topic>[^/]+)/records(:batch)?/?$"), (topic(R.WRITE),)),
    ("GET", re.compile(rf"^{_V3}/consumer-groups/(?P<group>[^/]+)(/.*)?$"), (group(R.DESCRIBE),)),
    (
        "DELETE",
        re.compile(rf"^{_V3}/consumer-groups/(?P<group>[^/]+)/(consumers|instances)/[^/]+/?$"),
        (group(R.READ),),
    ),
    ("GET", _p(_V3 + "/acls"), (cluster(R.DESCRIBE),)),
    ("POST", _p(_V3 + "/acls"), (cluster(R.ALTER),)),
    ("POST", _p(_V3 + "/acls:batch"), (cluster(R.ALTER),)),
    ("DELETE", _p(_V3 + "/acls"), (cluster(R.ALTER),)),
    # -- operations views -------------------------------------------------------------------------------
    ("GET", _p("/metrics"), (cluster(R.DESCRIBE),)),  # topic and group names are in its labels
    # -- the web console (docs/console.md): the same rules as the API; the overview pages and the charts'
    # data are filtered to what the principal may Describe (console/access.py), like the API's listings
    ("GET", re.compile(r"^/ui(/topics|/groups|/jobs|/data/series)?/?$"), ()),
    ("GET", re.compile(r"^/ui/static/.*$"), ()),  # the console's own CSS and script
    ("GET", re.compile(r"^/ui/topics/(?P<topic>[^/]+)/messages(/tail)?/?$"), (topic(R.READ),)),
    ("GET", _p("/ui/topics/{topic}"), (topic(R.DESCRIBE), topic(R.DESCRIBE_CONFIGS))),
    ("POST", _p("/ui/topics/{topic}/configs"), (topic(R.ALTER_CONFIGS),)),
    ("POST", _p("/ui/topics/{topic}/produce"), (topic(R.WRITE),)),
    ("POST", _p("/ui/topics"), (cluster(R.CREATE),)),
    ("GET", _p("/ui/groups/{group}"), (group(R.DESCRIBE),)),
    ("POST", _p("/ui/groups/{group}/reset"), (group(R.READ), cluster(R.DESCRIBE))),
    ("POST", _p("/ui/groups/{group}/delete"), (group(R.DELETE),)),
    ("*", re.compile(r"^/ui(/.*)?$"), (cluster(R.DESCRIBE),)),
]

#: Paths open to anyone, also with auth on: liveness, readiness, the API docs, the console's JS libraries.
OPEN_PATHS = re.compile(r"^/(healthz|readyz|docs(/.*)?|redoc|openapi\.json|ui/vendor/.*)$")


def needs_for(method: str, path: str) -> tuple[tuple[Need, ...], re.Match[str] | None]:
    """The checks of a request (empty: authenticated is enough) and the path match that names them."""
    for m, pattern, needs in TABLE:
        if m not in ("*", method):
            continue
        match = pattern.match(path)
        if match is not None:
            return needs, match
    return (), None
