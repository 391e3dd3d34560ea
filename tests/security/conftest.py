"""Fixtures of the security tests: a real gateway with auth on, its users, keys and ACL helpers."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "api"))

from gateway_harness import Gateway, start_gateway, stop_gateway

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


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureGateway]:
    from topiclake.security import UserStore

    root = tmp_path_factory.mktemp("secure")
    users = root / "users.htpasswd"
    store = UserStore(users)
    for name, pw in PASSWORDS.items():
        store.add(name, pw)
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public_file = root / "jwt.pub.pem"
    public_file.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    gw, server, thread = start_gateway(
        root / "wh",
        settings_overrides={
            "auth": True,
            "users_file": str(users),
            "super_users": ["User:admin"],
            "jwt_secret": JWT_SECRET,
            "jwt_public_key_file": str(public_file),
        },
    )
    try:
        authz = server.config.app.state.security.authorizer
        yield SecureGateway(gw, authz, private, gw.broker.cluster_id)
    finally:
        stop_gateway(gw, server, thread)


@pytest.fixture
def sg(secure: SecureGateway) -> Iterator[SecureGateway]:
    """The module's secure gateway with no ACLs before and after the test."""
    secure.clear()
    try:
        yield secure
    finally:
        secure.clear()
