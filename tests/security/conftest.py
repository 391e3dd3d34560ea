"""Fixtures of the security tests: a real gateway with auth on, its users, keys and ACL helpers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from secure_harness import JWT_SECRET, PASSWORDS, SecureGateway, start_gateway, stop_gateway


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
