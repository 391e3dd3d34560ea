"""Everything a listener needs to authenticate and authorize, made once per gateway from its settings."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from topiclake.errors import InvalidConfig
from topiclake.platform.storage import Storage
from topiclake.security.authorizer import Authorizer
from topiclake.security.inter_broker import BrokerSigner, load_or_create_key
from topiclake.security.principal import Principal
from topiclake.security.tokens import TokenVerifier
from topiclake.security.users import UserStore

if TYPE_CHECKING:
    from topiclake.settings import GatewaySettings

logger = logging.getLogger(__name__)


@dataclass
class Security:
    """A gateway's security: whether auth is on, who the users are, how tokens verify, the ACLs.

    Attributes:
        auth: False = open (the embedded default; logged loudly at start).
        users: The htpasswd users (Basic, SASL/PLAIN, SCRAM), or None.
        tokens: The JWT verifier, or None.
        authorizer: The ACL decisions (always True when ``auth`` is False).
        signer: Signs the client's principal on requests sent to other brokers (auth on, in a cluster).
    """

    auth: bool
    users: UserStore | None
    tokens: TokenVerifier | None
    authorizer: Authorizer
    signer: BrokerSigner | None = None

    @classmethod
    def open(cls) -> Security:
        """No authentication, everything allowed (a library Broker, tests)."""
        return cls(False, None, None, Authorizer(None, enabled=False))

    def check_password(self, name: str, password: str) -> Principal | None:
        """``User:<name>`` when the password is right, else None."""
        if self.users is not None and self.users.verify_password(name, password):
            return Principal("User", name)
        return None

    def close(self) -> None:
        """Stop the ACL poller."""
        self.authorizer.close()


def security_from_settings(
    settings: GatewaySettings, storage_options: Mapping[str, str] | None = None
) -> Security:
    """Build the :class:`Security` of a gateway (the ACL table lives in ``settings.warehouse``).

    Raises:
        InvalidConfig: A configured file cannot be read, or a super user is not ``<type>:<name>``.
    """
    for su in settings.super_users:
        try:
            Principal.parse(su)
        except ValueError as exc:
            raise InvalidConfig(f"super user: {exc}") from exc
    users = UserStore(settings.users_file) if settings.users_file else None
    public_key = None
    if settings.jwt_public_key_file:
        try:
            public_key = Path(settings.jwt_public_key_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise InvalidConfig(f"cannot read jwt_public_key_file: {exc}") from exc
    secret = settings.jwt_secret.get_secret_value() if settings.jwt_secret else None
    tokens = (
        TokenVerifier(secret, public_key, issuer=settings.jwt_issuer, audience=settings.jwt_audience)
        if secret or public_key
        else None
    )
    storage = Storage(settings.warehouse, storage_options)
    authorizer = Authorizer(storage, settings.super_users, enabled=settings.auth)
    if settings.auth and users is None and tokens is None:
        logger.warning(
            "auth is on but neither users_file nor a JWT key is set: only TLS client certificates "
            "can authenticate"
        )
    signer = BrokerSigner(load_or_create_key(storage)) if settings.auth and settings.cluster else None
    return Security(settings.auth, users, tokens, authorizer, signer)
