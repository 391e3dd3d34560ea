"""Who may see and do what in the console: the seam where authentication and ACLs plug in.

Authentication does not exist yet, so everyone is ``anonymous`` and may do everything. When the auth
package lands, :func:`principal` reads the request's credentials (or the console asks for them) and
:func:`allowed` asks the ACLs; every page and action already goes through these two functions, and the
templates show only the actions ``allowed`` returns True for.
"""

from __future__ import annotations

from fastapi import Request

ANONYMOUS = "anonymous"

# Kafka's ACL operations the console checks, on resources like "topic:orders", "group:billing" or
# "cluster".
ACTIONS = ("Describe", "Read", "Write", "Create", "AlterConfigs", "Delete")


def principal(request: Request) -> str:
    """The principal making this request (``anonymous`` until authentication exists)."""
    return ANONYMOUS


def allowed(request: Request, action: str, resource: str) -> bool:
    """Whether this request's principal may do ``action`` on ``resource`` (always, until ACLs exist)."""
    return True
