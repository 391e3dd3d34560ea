"""TLS for the HTTP and Kafka listeners: SSL contexts, and the principal a client certificate stands for.

A client certificate's subject becomes the principal the way Kafka's ``ssl.principal.mapping.rules`` do
it. By default (``DEFAULT``) that is the whole distinguished name in RFC 2253 form (most specific attribute
first, as ``X500Principal.getName()`` writes it), e.g. ``User:CN=alice,OU=eng,O=Acme,C=US``; rules such as
``RULE:^CN=(.*?),OU=eng.*$/$1/L,DEFAULT`` map it to a shorter name (:class:`PrincipalMapper`). ACLs name
that principal. A connection without a client certificate has no TLS principal.
"""

from __future__ import annotations

import logging
import re
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509

from topiclake.security.principal import Principal

logger = logging.getLogger(__name__)


def distinguished_name(subject: x509.Name) -> str:
    """A subject as RFC 2253 text (``CN=alice,OU=eng,O=Acme,C=US``), as Java and Kafka write it."""
    return subject.rfc4514_string()


@dataclass(frozen=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""


#: Kafka's rule syntax: ``DEFAULT`` or ``RULE:pattern/replacement/[L|U]``, separated by commas or newlines.
_RULE = re.compile(r"\s*(?:(DEFAULT)|RULE:((?:\\.|[^\\/])*)/((?:\\.|[^\\/])*)/([LU]?))\s*(?:[,\n]|$)")


class PrincipalMapper:
    """Kafka's ``ssl.principal.mapping.rules``: the first rule whose pattern matches the whole DN maps it.

    Args:
        rules: ``DEFAULT`` (the DN unchanged) and/or ``RULE:pattern/replacement/[L|U]`` entries, comma- or
            newline-separated, tried in order; ``$1`` in a replacement is the first group, ``L``/``U``
            lower- or upper-cases the result. A DN no rule matches maps to nothing (the client is refused).

    Raises:
        ValueError: The rules do not parse, or a pattern is not a valid regular expression.
    """

    def __init__(self, rules: str = "DEFAULT") -> None:
        self.rules: list[_Rule] = []
        text, pos = rules.strip(), 0
        while pos < len(text):
            m = _RULE.match(text, pos)
            if m is None or m.end() == pos:
                raise ValueError(f"TLS principal mapping rules do not parse at {text[pos:]!r}")
            pos = m.end()
            if m.group(1):
                self.rules.append(_Rule(None))
                continue
            try:
                pattern = re.compile(m.group(2).replace("\\/", "/"))
            except re.error as exc:
                raise ValueError(f"TLS principal mapping rule {m.group(2)!r}: {exc}") from exc
            replacement = re.sub(r"\$(\d+)", r"\\g<\1>", m.group(3).replace("\\/", "/"))
            self.rules.append(_Rule(pattern, replacement, m.group(4)))
        if not self.rules:
            self.rules.append(_Rule(None))

    def map(self, dn: str) -> str | None:
        """The principal name of a DN, or None when no rule applies."""
        for rule in self.rules:
            if rule.pattern is None:
                return dn
            if rule.pattern.fullmatch(dn):
                name = rule.pattern.sub(rule.replacement, dn)
                return name.lower() if rule.case == "L" else name.upper() if rule.case == "U" else name
        return None


_DEFAULT = PrincipalMapper()


def principal_from_certificate(
    cert: bytes | x509.Certificate | x509.Name | str, mapper: PrincipalMapper = _DEFAULT
) -> Principal:
    """The principal of a client certificate: its subject DN mapped by Kafka's rules (default: unchanged).

    Args:
        cert: The certificate as DER bytes (``SSLObject.getpeercert(binary_form=True)``), a parsed
            certificate, its subject, or the subject already written as RFC 2253 text.
        mapper: The mapping rules (``DEFAULT``: the whole DN).

    Raises:
        ValueError: The bytes are no DER certificate, the subject is empty, or no rule maps it.
    """
    if isinstance(cert, bytes):
        cert = x509.load_der_x509_certificate(cert)
    if isinstance(cert, x509.Certificate):
        cert = cert.subject
    dn = distinguished_name(cert) if isinstance(cert, x509.Name) else cert.strip()
    if not dn:
        raise ValueError("the certificate has an empty subject: it names no principal")
    name = mapper.map(dn)
    if not name:
        raise ValueError(f"no TLS principal mapping rule applies to {dn!r}")
    return Principal("User", name)


def peer_principal(
    ssl_object: ssl.SSLObject | ssl.SSLSocket | None, mapper: PrincipalMapper = _DEFAULT
) -> Principal | None:
    """The principal of the verified client certificate of a TLS connection (None: no certificate, or no
    mapping rule applies to it)."""
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    if not der:
        return None
    try:
        return principal_from_certificate(der, mapper)
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
    "PrincipalMapper",
    "client_context",
    "distinguished_name",
    "peer_principal",
    "principal_from_certificate",
    "server_context",
]
