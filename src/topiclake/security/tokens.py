"""Bearer tokens for services: JSON Web Tokens checked with PyJWT (HS256 secret or RS256 public key).

The token's ``sub`` claim names the principal (``User:<sub>``); ``exp`` is required and checked, and
``iss``/``aud`` too when configured. Any failure is :class:`~topiclake.errors.Unauthorized` with one
message that says nothing about which check failed (the server log has it at debug level).
"""

from __future__ import annotations

import logging

import jwt

from topiclake.errors import Unauthorized
from topiclake.security.principal import Principal

logger = logging.getLogger(__name__)

_MESSAGE = "invalid credentials"


class TokenVerifier:
    """Verifies JWT bearer tokens.

    Args:
        secret: HS256 shared secret (optional).
        public_key: RS256 public key, PEM text (optional). At least one of the two is needed.
        issuer: Required ``iss`` claim, when set.
        audience: Required ``aud`` claim, when set.
        leeway_s: Clock skew tolerated on ``exp``/``nbf``.
    """

    def __init__(
        self,
        secret: str | None = None,
        public_key: str | None = None,
        *,
        issuer: str | None = None,
        audience: str | None = None,
        leeway_s: float = 30.0,
    ) -> None:
        if not secret and not public_key:
            raise ValueError("a TokenVerifier needs an HS256 secret or an RS256 public key")
        self._keys: dict[str, str] = {}
        if secret:
            self._keys["HS256"] = secret
        if public_key:
            self._keys["RS256"] = public_key
        self.issuer = issuer
        self.audience = audience
        self.leeway_s = leeway_s

    @property
    def algorithms(self) -> list[str]:
        """The algorithms accepted (only those with a configured key: no ``none``, no key confusion)."""
        return list(self._keys)

    def verify(self, token: str) -> Principal:
        """The principal a valid token names.

        Raises:
            Unauthorized: The token is malformed, expired, signed with another key or algorithm, or lacks
                ``sub``/``exp`` (or the configured ``iss``/``aud``).
        """
        try:
            alg = jwt.get_unverified_header(token).get("alg")
            key = self._keys.get(alg) if isinstance(alg, str) else None
            if key is None or not isinstance(alg, str):
                raise jwt.InvalidAlgorithmError(f"algorithm {alg!r} not accepted")
            claims = jwt.decode(
                token,
                key,
                algorithms=[alg],
                issuer=self.issuer,
                audience=self.audience,
                leeway=self.leeway_s,
                options={"require": ["exp", "sub"], "verify_aud": self.audience is not None},
            )
        except jwt.PyJWTError as exc:
            logger.debug("bearer token rejected: %s", exc)
            raise Unauthorized(_MESSAGE) from exc
        sub = claims.get("sub")
        if not isinstance(sub, str) or not sub:
            raise Unauthorized(_MESSAGE)
        return Principal("User", sub)
