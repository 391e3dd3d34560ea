"""A real gateway with auth on for the security tests: its users, keys and ACL helpers.

Imported by name (``from secure_harness import ...``): pytest puts this folder on the import path.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import jwt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "api"))

from gateway_harness import Gateway, start_gateway, stop_gateway

__all__ = ["JWT_SECRET", "PASSWORDS", "Gateway", "SecureGateway", "start_gateway", "stop_gateway"]

from topiclake.security import (
    AclBinding,
    AclFilter,
    Authorizer,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

PASSWORDS = {"alice": "alice-pw", "bob": "bob-pw", "admin": "admin-pw"}
JWT_SECRET = "an-hs256-secret-of-32-bytes-or-more!"


@dataclass
class SecureGateway:
    """A gateway with auth on: clients per user, the RSA key of RS256 tokens, the authorizer."""

    gw: Gateway
    authz: Authorizer
    private_key: bytes
    cluster_id: str

    def client(self, user: str | None = None, password: str | None = None, **headers: str) -> httpx.Client:
        auth = (user, password or PASSWORDS[user]) if user else None
        return httpx.Client(base_url=self.gw.url, timeout=30, auth=auth, headers=headers)

    def token(self, sub: str, *, rs256: bool = False, exp_s: float = 60) -> str:
        claims = {"sub": sub, "exp": time.time() + exp_s}
        if rs256:
            return jwt.encode(claims, self.private_key, "RS256")
        return jwt.encode(claims, JWT_SECRET, "HS256")

    def allow(
        self,
        principal: str,
        op: Operation,
        rtype: ResourceType,
        name: str,
        *,
        pattern: PatternType = PatternType.LITERAL,
        permission: Permission = Permission.ALLOW,
    ) -> None:
        self.authz.add([AclBinding(principal, "*", rtype, name, pattern, op, permission)])

    def clear(self) -> None:
        self.authz.remove(AclFilter())
