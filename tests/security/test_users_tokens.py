"""Users (htpasswd bcrypt + SCRAM keys), JWT bearer tokens, and the settings that build them."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
from pathlib import Path

import bcrypt
import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from scramp import ScramClient, ScramMechanism

from topiclake.errors import Unauthorized
from topiclake.security import Principal, TokenVerifier, UserStore, security_from_settings
from topiclake.settings import GatewaySettings


def test_add_verify_remove(tmp_path: Path) -> None:
    store = UserStore(tmp_path / "users.htpasswd")
    store.add("alice", "s3cret")
    store.add("bob", "pw")
    assert store.names() == ["alice", "bob"]
    assert store.verify_password("alice", "s3cret")
    assert store.verify_password("alice", "s3cret")  # remembered
    assert not store.verify_password("alice", "wrong")
    assert not store.verify_password("carol", "s3cret")
    store.add("alice", "new")  # a new password forgets the old one at once
    assert not store.verify_password("alice", "s3cret")
    assert store.verify_password("alice", "new")
    assert store.remove("alice") and not store.remove("alice")
    assert not store.verify_password("alice", "new")
    assert store.scram_credential("alice", "SCRAM-SHA-256") is None
    assert (tmp_path / "users.htpasswd").stat().st_mode & 0o077 == 0


def test_the_file_is_apache_htpasswd_compatible(tmp_path: Path) -> None:
    path = tmp_path / "users.htpasswd"
    store = UserStore(path)
    store.add("alice", "pw")
    line = path.read_text().strip()
    assert line.startswith("alice:$2y$")  # what htpasswd -B writes
    assert bcrypt.checkpw(b"pw", line.split(":", 1)[1].encode())
    # a line written by another tool (htpasswd -B output, $2y$ cost 5) is picked up without a restart
    other = bcrypt.hashpw(b"carol-pw", bcrypt.gensalt(5)).replace(b"$2b$", b"$2y$", 1).decode()
    with path.open("a") as f:
        f.write(f"# a comment\ncarol:{other}\n")
    assert store.verify_password("carol", "carol-pw")
    assert store.scram_credential("carol", "SCRAM-SHA-256") is None  # htpasswd users: Basic/PLAIN only


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_credentials_follow_rfc_5802(tmp_path: Path, mechanism: str) -> None:
    store = UserStore(tmp_path / "u")
    store.add("alice", "pencil")
    cred = store.scram_credential("alice", mechanism)
    assert cred is not None and cred.iterations == 4096
    algo = "sha256" if mechanism.endswith("256") else "sha512"
    salted = hashlib.pbkdf2_hmac(algo, b"pencil", cred.salt, cred.iterations)
    client_key = hmac.new(salted, b"Client Key", algo).digest()
    assert cred.stored_key == hashlib.new(algo, client_key).digest()
    assert cred.server_key == hmac.new(salted, b"Server Key", algo).digest()
    # a whole exchange, client and server from scramp, with the stored keys only
    server = ScramMechanism(mechanism).make_server(
        lambda _u: (cred.salt, cred.stored_key, cred.server_key, cred.iterations)
    )
    client = ScramClient([mechanism], "alice", "pencil")
    server.set_client_first(client.get_client_first())
    client.set_server_first(server.get_server_first())
    server.set_client_final(client.get_client_final())
    client.set_server_final(server.get_server_final())
    assert base64.b64encode(cred.salt)


def test_bad_names_are_refused(tmp_path: Path) -> None:
    store = UserStore(tmp_path / "u")
    for bad in ("a:b", "", " a", "a\nb"):
        with pytest.raises(ValueError):
            store.add(bad, "pw")


def _rsa_pair() -> tuple[bytes, str]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    private = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private, public.decode()


def test_hs256_tokens() -> None:
    verifier = TokenVerifier(secret="k" * 32, issuer="me")
    good = jwt.encode({"sub": "svc", "exp": time.time() + 60, "iss": "me"}, "k" * 32, "HS256")
    assert verifier.verify(good) == Principal("User", "svc")
    bad = [
        jwt.encode({"sub": "svc", "exp": time.time() - 120, "iss": "me"}, "k" * 32, "HS256"),  # expired
        jwt.encode({"sub": "svc", "iss": "me"}, "k" * 32, "HS256"),  # no exp
        jwt.encode({"sub": "svc", "exp": time.time() + 60, "iss": "me"}, "x" * 32, "HS256"),  # other key
        jwt.encode({"sub": "svc", "exp": time.time() + 60, "iss": "you"}, "k" * 32, "HS256"),  # issuer
        jwt.encode({"exp": time.time() + 60, "iss": "me"}, "k" * 32, "HS256"),  # no sub
        jwt.encode({"sub": "svc", "exp": time.time() + 60, "iss": "me"}, None, "none"),  # unsigned
        "not-a-token",
    ]
    for token in bad:
        with pytest.raises(Unauthorized) as info:
            verifier.verify(token)
        assert info.value.message == "invalid credentials"


def test_rs256_tokens_and_no_key_confusion() -> None:
    private, public = _rsa_pair()
    verifier = TokenVerifier(public_key=public, audience="topiclake")
    token = jwt.encode({"sub": "etl", "exp": time.time() + 60, "aud": "topiclake"}, private, "RS256")
    assert verifier.verify(token) == Principal("User", "etl")
    other, _ = _rsa_pair()
    forged = jwt.encode({"sub": "etl", "exp": time.time() + 60, "aud": "topiclake"}, other, "RS256")
    with pytest.raises(Unauthorized):
        verifier.verify(forged)
    with pytest.raises(Unauthorized):  # HS256 signed with the public key: only RS256 has a key here
        verifier.verify(jwt.api_jws.PyJWS().encode(b'{"sub":"etl"}', public.encode()[:32], algorithm="HS256"))


def test_security_from_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOPICLAKE_SUPER_USERS", "User:admin, User:ops")
    monkeypatch.setenv("TOPICLAKE_AUTH", "true")
    monkeypatch.setenv("TOPICLAKE_JWT_SECRET", "s" * 32)
    settings = GatewaySettings(warehouse=str(tmp_path), users_file=str(tmp_path / "users"))
    assert settings.super_users == ["User:admin", "User:ops"]
    sec = security_from_settings(settings, None)
    assert sec.auth and sec.users is not None and sec.tokens is not None
    assert sec.authorizer.super_users == frozenset({"User:admin", "User:ops"})
    assert sec.authorizer.enabled
    for var in ("TOPICLAKE_AUTH", "TOPICLAKE_JWT_SECRET"):
        monkeypatch.delenv(var)
    off = security_from_settings(GatewaySettings(warehouse=str(tmp_path)), None)
    assert not off.auth and off.users is None and off.tokens is None and not off.authorizer.enabled


def test_unknown_users_are_checked_at_the_cost_of_the_files_hashes() -> None:
    """An unknown name costs one bcrypt at the file's own cost, so answer times do not reveal names."""
    from topiclake.security.users import _dummy_hash

    apache_default = bcrypt.hashpw(b"pw", bcrypt.gensalt(5)).decode()
    assert _dummy_hash({"alice": apache_default}).split(b"$")[2] == b"05"
    ours = bcrypt.hashpw(b"pw", bcrypt.gensalt(10)).decode()
    assert _dummy_hash({"bob": ours}).split(b"$")[2] == b"10"
