"""Helpers of the TLS and Kafka-security tests (imported by name: ``from tls_harness import ...``).

Certificates are made here with ``cryptography``: a CA, a server certificate for 127.0.0.1/localhost
(also usable as a client certificate, as brokers present it to each other under mTLS), and client
certificates. A gateway is started the way ``topiclake serve`` starts it: uvicorn with the settings' TLS
options, the Kafka listener on a free port.
"""

from __future__ import annotations

import datetime
import ipaddress
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "api"))

from gateway_harness import Gateway

from topiclake.api import create_app
from topiclake.api.tls import uvicorn_tls_options
from topiclake.platform import Broker, BrokerConfig, Storage
from topiclake.process.ports import free_port
from topiclake.settings import GatewaySettings


@dataclass
class Certs:
    """PEM files of a test PKI."""

    ca: Path
    server_cert: Path
    server_key: Path
    folder: Path
    _ca_key: ec.EllipticCurvePrivateKey
    _ca_cert: x509.Certificate

    def client(self, cn: str, ou: str = "eng") -> tuple[Path, Path]:
        """A client certificate ``CN=<cn>,OU=<ou>,O=Acme`` signed by the CA: (cert file, key file)."""
        subject = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Acme"),
                x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou),
                x509.NameAttribute(NameOID.COMMON_NAME, cn),
            ]
        )
        return _issue(self.folder, cn, subject, self._ca_key, self._ca_cert, server=False)


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write(
    folder: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> tuple[Path, Path]:
    cert_path, key_path = folder / f"{stem}.crt", folder / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


def _issue(
    folder: Path,
    stem: str,
    subject: x509.Name,
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    server: bool,
) -> tuple[Path, Path]:
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                if server
                else [ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
    )
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return _write(folder, stem, builder.sign(ca_key, hashes.SHA256()), key)


def make_certs(folder: Path) -> Certs:
    """A CA and a server certificate for 127.0.0.1 under ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "topiclake test CA")])
    now = datetime.datetime.now(datetime.UTC)
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_path, _ = _write(folder, "ca", ca_cert, ca_key)
    server = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "broker")])
    cert, key = _issue(folder, "server", server, ca_key, ca_cert, server=True)
    return Certs(ca_path, cert, key, folder, ca_key, ca_cert)


@dataclass
class Running:
    """A gateway started with TLS settings: its URL, broker, Kafka port and how to stop it."""

    url: str
    broker: Broker
    storage: Storage
    kafka_port: int
    settings: GatewaySettings
    app: Any
    stop: Callable[[], None]

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    def gateway(self, client: httpx.Client) -> Gateway:
        return Gateway(self.url, self.broker, self.storage, client)


def start(
    warehouse: Path,
    kafka: bool = True,
    wrap: Callable[[Any], Any] | None = None,
    ready: Callable[[str], bool] | None = None,
    **overrides: Any,
) -> Running:
    """Start a gateway in a thread with ``overrides`` as GatewaySettings (e.g. tls_cert, tls_key, tls_ca);
    ``wrap`` wraps the ASGI app (to look at scopes); ``ready(url)`` says when it is up (default: a TCP
    connect succeeds)."""
    port = free_port()
    kafka_port = free_port() if kafka else 0
    config = BrokerConfig(linger_ms=1.0)
    settings = GatewaySettings(
        warehouse=str(warehouse),
        host="127.0.0.1",
        port=port,
        broker=config,
        kafka_port=kafka_port,
        cluster=False,
        **overrides,
    )
    storage = Storage(str(warehouse))
    broker = Broker(storage, config)
    app = create_app(settings, broker=broker)
    server = uvicorn.Server(
        uvicorn.Config(
            wrap(app) if wrap else app,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            **uvicorn_tls_options(settings),
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    scheme = "https" if settings.tls_cert else "http"
    url = f"{scheme}://127.0.0.1:{port}"

    def stop() -> None:
        server.should_exit = True
        thread.join(10)
        broker.close()

    deadline = time.monotonic() + 20
    while not server.started or (kafka_port and not _listening(kafka_port)):
        if time.monotonic() > deadline or not thread.is_alive():
            stop()
            raise RuntimeError("gateway did not start")
        time.sleep(0.02)
    if ready is not None:
        while not ready(url):
            if time.monotonic() > deadline:
                stop()
                raise RuntimeError("gateway did not answer")
            time.sleep(0.05)
    return Running(url, broker, storage, kafka_port, settings, app, stop)


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False
