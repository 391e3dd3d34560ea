"""TLS and mTLS on the HTTP listener, with certificates made in the test: httpx, the Python client, and
broker-to-broker forwarding over https."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pytest
from tls_harness import Certs, Running, make_certs, start

from topiclake.api.forwarding import HttpForwarder
from topiclake.api.tls import TLS_PRINCIPAL, broker_client_context
from topiclake.client import TopiclakeClient
from topiclake.platform.cluster import BrokerEndpoint
from topiclake.security.principal import Principal
from topiclake.security.tls import PrincipalMapper, principal_from_certificate
from topiclake.settings import GatewaySettings


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("pki"))


BIN = pa.binary()
#: Kafka's ssl.principal.mapping.rules: engineers by their CN, anything else by its whole DN
RULES = "RULE:^CN=([a-z]+),OU=eng,O=Acme$/$1/,DEFAULT"


def _recording(seen: list[Any]) -> Any:
    def wrap(app: Any) -> Any:
        async def recorder(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http":
                seen.append(scope.get(TLS_PRINCIPAL))
            await app(scope, receive, send)

        return recorder

    return wrap


@pytest.fixture
def tls_gateway(tmp_path: Path, certs: Certs) -> Iterator[Running]:
    running = start(
        tmp_path / "wh", kafka=False, tls_cert=str(certs.server_cert), tls_key=str(certs.server_key)
    )
    try:
        yield running
    finally:
        running.stop()


def test_https_produce_and_consume_with_httpx(tls_gateway: Running, certs: Certs) -> None:
    with httpx.Client(base_url=tls_gateway.url, verify=ssl.create_default_context(cafile=str(certs.ca))) as c:
        assert c.post("/v1/topics", json={"name": "orders", "partitions": 1}).status_code in (200, 201)
        r = c.post("/v1/topics/orders/records", json={"records": [{"value": "hello"}]})
        assert r.status_code == 200, r.text
        got = c.get("/v1/topics/orders/partitions/0/records", params={"offset": 0})
        assert got.status_code == 200
        assert got.json()["records"][0]["offset"] == 0 and got.json()["high_watermark"] == 1
    # plain http on the TLS port is no conversation, and an unverified server is refused
    with pytest.raises(httpx.HTTPError):
        httpx.get(tls_gateway.url.replace("https", "http") + "/healthz", timeout=5)
    with pytest.raises(httpx.ConnectError):
        httpx.get(tls_gateway.url + "/healthz", timeout=5)


def test_python_client_over_https(tls_gateway: Running, certs: Certs) -> None:
    with TopiclakeClient(tls_gateway.url, verify=str(certs.ca)) as tl:
        tl.create_topic("events", partitions=1)
        tl.produce("events", [{"value": "v1"}])
        assert [r["value"] for r in tl.fetch("events", 0, 0, encoding="json")["records"]] == ["v1"]


def test_mtls_requires_a_client_certificate_and_hands_its_principal_on(tmp_path: Path, certs: Certs) -> None:
    seen: list[Any] = []
    running = start(
        tmp_path / "wh",
        kafka=False,
        wrap=_recording(seen),
        tls_cert=str(certs.server_cert),
        tls_key=str(certs.server_key),
        tls_ca=str(certs.ca),
        tls_principal_mapping_rules=RULES,
    )
    try:
        verify = ssl.create_default_context(cafile=str(certs.ca))
        with pytest.raises(httpx.HTTPError):  # the handshake is refused without a client certificate
            httpx.get(running.url + "/healthz", verify=verify, timeout=5)
        cert, key = certs.client("alice")
        ctx = ssl.create_default_context(cafile=str(certs.ca))
        ctx.load_cert_chain(str(cert), str(key))
        assert httpx.get(running.url + "/healthz", verify=ctx, timeout=5).status_code == 200
        assert seen[-1] == Principal("User", "alice")
        # the Python client presents a certificate the same way
        with TopiclakeClient(running.url, verify=str(certs.ca), cert=(str(cert), str(key))) as tl:
            tl.create_topic("t", partitions=1)
        assert seen[-1] == Principal("User", "alice")
        # another broker forwards over https with its own certificate, verified by tls_ca
        forwarder = HttpForwarder(1, tls=broker_client_context(running.settings))
        try:
            target = BrokerEndpoint(0, "127.0.0.1", int(running.url.rsplit(":", 1)[1]))
            table = pa.table(
                {
                    "key": pa.array([None], pa.binary()),
                    "value": pa.array([b"fwd"], pa.binary()),
                    "headers": pa.array([None], pa.list_(pa.struct([("key", pa.string()), ("value", BIN)]))),
                    "timestamp_ms": pa.array([None], pa.int64()),
                }
            )
            results = forwarder.produce(target, "t", 0, table, "all", None, None)
            assert results[0].error is None and results[0].offset == 0
        finally:
            forwarder.close()
        assert seen[-1] == Principal("User", "CN=broker")
    finally:
        running.stop()


def test_principal_from_certificate_follows_kafkas_default_rule(certs: Certs) -> None:
    from cryptography import x509

    cert, _ = certs.client("bob", ou="ops")
    parsed = x509.load_pem_x509_certificate(cert.read_bytes())
    assert str(principal_from_certificate(parsed)) == "User:CN=bob,OU=ops,O=Acme"
    from cryptography.hazmat.primitives.serialization import Encoding

    assert principal_from_certificate(parsed.public_bytes(Encoding.DER)) == principal_from_certificate(parsed)
    assert str(principal_from_certificate("CN=x,O=y")) == "User:CN=x,O=y"
    with pytest.raises(ValueError):
        principal_from_certificate("")


def test_principal_mapping_rules_as_kafka_writes_them() -> None:
    mapper = PrincipalMapper(
        "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,\n"
        "RULE:^CN=(.*?),OU=(.*?),O=(.*?)$/$1@$2/L,"
        "RULE:^O=(.*)$/org-$1/U"
    )
    assert mapper.map("CN=billing,OU=ServiceUsers,O=Acme") == "billing"
    assert mapper.map("CN=Alice,OU=ENG,O=Acme") == "alice@eng"
    assert mapper.map("O=acme") == "ORG-ACME"
    assert mapper.map("CN=x") is None  # no rule, no DEFAULT: no principal
    assert PrincipalMapper().map("CN=x,O=y") == "CN=x,O=y"
    assert str(principal_from_certificate("CN=bob,OU=eng,O=Acme", PrincipalMapper(RULES))) == "User:bob"
    for bad in ("RULE:^(/x/", "SOMETHING", "RULE:a/b"):
        with pytest.raises(ValueError):
            PrincipalMapper(bad)
    with pytest.raises(ValueError, match="do not parse"):  # a setting that cannot work stops serve
        GatewaySettings(tls_principal_mapping_rules="SOMETHING")
