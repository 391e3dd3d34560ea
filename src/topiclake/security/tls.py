"""TLS for the HTTP and Kafka listeners: SSL contexts, and the principal a client certificate stands for.

A client certificate's subject becomes the principal the way Kafka's default
``ssl.principal.mapping.rules=DEFAULT`` does it: the whole distinguished name in RFC 2253 form (most specific
attribute first, as ``X500Principal.getName()`` writes it), e.g. ``User:CN=alice,OU=eng,O=Acme,C=US``.
ACLs name that principal. A connection without a client certificate has no TLS principal.
"""

from __future__ import annotations

import logging
import ssl
from pathlib import Path

from cryptography import x509

from topiclake.security.principal import Principal

logger = logging.getLogger(__name__)


def distinguished_name(subject: x509.Name) -> str:
    """A subject as RFC 2253 text (``CN=alice,OU=eng,O=Acme,C=US``), as Java and Kafka write it."""
    return subject.rfc4514_string()


def principal_from_certificate(cert: bytes | x509.Certificate | x509.Name | str) -> Principal:
    """The principal of a client certificate, by Kafka's DEFAULT mapping rule (the whole subject DN).

    Args:
        cert: The certificate as DER bytes (``SSLObject.getpeercert(binary_form=True)``), a parsed
            certificate, its subject, or the subject already written as RFC 2253 text.

    Raises:
        ValueError: The bytes are no DER certificate, or the subject is empty.
    """
    if isinstance(cert, bytes):
        cert = x509.load_der_x509_certificate(cert)
    if isinstance(cert, x509.Certificate):
        cert = cert.subject
    name = distinguished_name(cert) if isinstance(cert, x509.Name) else cert.strip()
    if not name:
        raise ValueError("the certificate has an empty subject: it names no principal")
    return Principal("User", name)


def peer_principal(ssl_object: ssl.SSLObject | ssl.SSLSocket | None) -> Principal | None:
    """The principal of the verified client certificate of a TLS connection (None: no certificate)."""
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    try:
        return principal_from_certificate(der)
    except ValueError as exc:
        logger.warning("client certificate names no principal: %s", exc)
        return None


def server_context(
    cert_file: str | Path, key_file: str | Path, ca_file: str | Path | None = None
) -> ssl.SSLContext:
    """A server-side context: TLS 1.2 or later; with ``ca_file``, client certificates signed by it are
    required (mTLS) and any other client fails the handshake.

    Raises:
        OSError: A file cannot be read.
        ssl.SSLError: A file is no PEM certificate or key, or the key does not match the certificate.
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(cert_file), str(key_file))
    if ca_file is not None:
        ctx.load_verify_locations(cafile=str(ca_file))
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


def client_context(
    ca_file: str | Path | None = None,
    cert_file: str | Path | None = None,
    key_file: str | Path | None = None,
) -> ssl.SSLContext:
    """A client-side context that verifies the server (by ``ca_file``, else the system's trust store and
    ``SSL_CERT_FILE``) and its host name, and presents ``cert_file`` when the server asks for one (mTLS)."""
    ctx = ssl.create_default_context(cafile=str(ca_file) if ca_file is not None else None)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_file is not None:
        ctx.load_cert_chain(str(cert_file), str(key_file) if key_file is not None else None)
    return ctx


__all__ = [
    "client_context",
    "distinguished_name",
    "peer_principal",
    "principal_from_certificate",
    "server_context",
]
