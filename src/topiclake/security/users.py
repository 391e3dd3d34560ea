"""Users and their passwords: an htpasswd-format file of bcrypt hashes, plus SCRAM credentials beside it.

The file is Apache's: one ``name:hash`` line per user, hashes ``$2y$``/``$2b$``/``$2a$`` bcrypt (what
``htpasswd -B`` writes), so ``htpasswd -B -c users.htpasswd alice`` and ``topiclake users add`` manage the
same file. The store re-reads the file when it changes (mtime or size), so adding a user needs no restart.

SCRAM-SHA-256/512 (RFC 5802/7677, the Kafka listener's SASL) cannot use a bcrypt hash: ``topiclake users
add`` also writes the salted SCRAM keys to ``<users-file>.scram`` (``name:mechanism:iterations:salt:
stored_key:server_key``, base64), as Kafka keeps them in its metadata. Users added with Apache's htpasswd
have Basic and SASL/PLAIN only.

bcrypt is slow on purpose (~a few ms to 100s of ms); a successful check is remembered (keyed by an HMAC of
the password under a per-process key, never the password itself) until the user's hash changes, so HTTP
Basic on every request costs one bcrypt per user and password, not one per request.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import logging
import os
import secrets
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import bcrypt
from scramp import ScramMechanism

logger = logging.getLogger(__name__)

#: SCRAM mechanisms the store derives credentials for (Kafka's).
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
#: Kafka's minimum (and default) SCRAM iteration count.
SCRAM_ITERATIONS = 4096
#: bcrypt cost of new hashes (htpasswd -B defaults to 5; 10 is the bcrypt package's usual floor).
BCRYPT_ROUNDS = 10
_NAME_FORBIDDEN = (":", "\n", "\r")
_DUMMY_HASHES: dict[int, bytes] = {}


def _dummy_hash(users: Mapping[str, str]) -> bytes:
    """A hash to check an unknown user's password against, as costly as the file's real ones.

    Users added by Apache's ``htpasswd -B`` have its cost (5 by default), ours ``BCRYPT_ROUNDS``: an
    unknown name must take as long as a wrong password, or the answer time tells which names exist.
    """
    cost = BCRYPT_ROUNDS
    for stored in users.values():
        parts = stored.split("$")
        if len(parts) > 3 and parts[2].isdigit():
            cost = min(max(int(parts[2]), 4), 31)
            break
    if cost not in _DUMMY_HASHES:
        _DUMMY_HASHES[cost] = bcrypt.hashpw(b"topiclake-no-such-user", bcrypt.gensalt(cost))
    return _DUMMY_HASHES[cost]


@dataclass(frozen=True)
class ScramCredential:
    """A user's stored SCRAM keys for one mechanism (RFC 5802: never the password)."""

    mechanism: str
    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes


def _check_name(name: str) -> None:
    if not name or any(c in name for c in _NAME_FORBIDDEN) or name != name.strip():
        raise ValueError(f"invalid user name {name!r}: no colons, line breaks or surrounding blanks")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def scram_credential(password: str, mechanism: str, iterations: int = SCRAM_ITERATIONS) -> ScramCredential:
    """Derive SCRAM keys for a password (fresh random salt) with scramp."""
    salt, stored_key, server_key, count = ScramMechanism(mechanism).make_auth_info(
        password, iteration_count=iterations
    )
    return ScramCredential(mechanism, salt, count, stored_key, server_key)


class _File:
    """One small text file of ``name:...`` lines, re-read when its mtime or size changes."""

    def __init__(self, path: Path, key_fields: int = 1) -> None:
        self.path = path
        self._key_fields = key_fields  # the key is the first fields: name (htpasswd), name:mechanism (SCRAM)
        self._stamp: tuple[int, int] | None = None
        self.lines: dict[str, str] = {}

    def load(self) -> dict[str, str]:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._stamp, self.lines = None, {}
            return self.lines
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            lines: dict[str, str] = {}
            for raw in self.path.read_text(encoding="utf-8").splitlines():
                line = raw.strip()
                if not line or line.startswith("#"):
                    continue
                fields = line.split(":", self._key_fields)
                if len(fields) > self._key_fields:
                    lines[":".join(fields[:-1])] = fields[-1]
            self._stamp, self.lines = stamp, lines
        return self.lines

    def save(self, lines: dict[str, str]) -> None:
        """Write atomically (temp file + rename), readable by the owner only."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.writelines(f"{name}:{rest}\n" for name, rest in lines.items())
            os.chmod(tmp, 0o600)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._stamp = None


class UserStore:
    """Users from an htpasswd-format file (bcrypt), SCRAM credentials in ``<file>.scram``.

    Args:
        path: The htpasswd file (created by :meth:`add` when missing).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._htpasswd = _File(self.path)
        self._scram = _File(self.path.with_name(self.path.name + ".scram"), key_fields=2)
        self._lock = threading.Lock()
        self._key = secrets.token_bytes(32)
        self._verified: dict[str, tuple[str, bytes]] = {}  # name -> (hash, hmac of the password)

    def verified_before(self, name: str, password: str) -> bool:
        """Whether this password was verified for the user and the user's hash has not changed since.

        Cheap (a stat of the file and an HMAC, no bcrypt): callers on an event loop try this first and
        run :meth:`verify_password` in a worker thread only when it answers False.
        """
        with self._lock:
            stored = self._htpasswd.load().get(name)
        seen = self._verified.get(name)
        if stored is None or seen is None or seen[0] != stored:
            return False
        digest = hmac.new(self._key, password.encode("utf-8"), hashlib.sha256).digest()
        return hmac.compare_digest(seen[1], digest)

    def verify_password(self, name: str, password: str) -> bool:
        """Whether ``password`` is the user's (False for unknown users, in about the same time)."""
        if self.verified_before(name, password):
            return True
        with self._lock:
            users = self._htpasswd.load()
        stored = users.get(name)
        digest = hmac.new(self._key, password.encode("utf-8"), hashlib.sha256).digest()
        candidate = stored.encode("ascii", "replace") if stored is not None else _dummy_hash(users)
        try:
            ok = bcrypt.checkpw(password.encode("utf-8"), candidate)
        except ValueError:  # not a bcrypt hash (e.g. an MD5 or SHA line from plain htpasswd)
            logger.warning("user %s in %s has no bcrypt hash: use htpasswd -B", name, self.path)
            ok = False
        if ok and stored is not None:
            self._verified[name] = (stored, digest)
            return True
        return False

    def scram_credential(self, name: str, mechanism: str) -> ScramCredential | None:
        """The user's SCRAM keys for ``mechanism``, or None (unknown user, or added with htpasswd)."""
        with self._lock:
            if name not in self._htpasswd.load():
                return None  # removed with htpasswd -D: the leftover SCRAM keys no longer count
            entry = self._scram.load().get(f"{name}:{mechanism}")
        if entry is None:
            return None
        try:
            iterations, salt, stored_key, server_key = entry.split(":")
            return ScramCredential(
                mechanism,
                base64.b64decode(salt),
                int(iterations),
                base64.b64decode(stored_key),
                base64.b64decode(server_key),
            )
        except ValueError:
            logger.warning("bad SCRAM line for user %s in %s", name, self._scram.path)
            return None

    def add(self, name: str, password: str) -> None:
        """Add a user or change their password (bcrypt hash and SCRAM keys for both mechanisms)."""
        _check_name(name)
        if not password:
            raise ValueError("the password is empty")
        hashed = bcrypt.hashpw(password.encode("utf-8"), bcrypt.gensalt(BCRYPT_ROUNDS))
        apache = b"$2y$" + hashed[4:]  # the same algorithm; $2y$ is what htpasswd -B writes and reads
        creds = [scram_credential(password, m) for m in SCRAM_MECHANISMS]
        with self._lock:
            lines = dict(self._htpasswd.load())
            lines[name] = apache.decode("ascii")
            self._htpasswd.save(lines)
            scram = {k: v for k, v in self._scram.load().items() if not k.startswith(f"{name}:")}
            for c in creds:
                scram[f"{name}:{c.mechanism}"] = ":".join(
                    [str(c.iterations), _b64(c.salt), _b64(c.stored_key), _b64(c.server_key)]
                )
            self._scram.save(scram)
            self._verified.pop(name, None)
        logger.info("user %s saved in %s", name, self.path)

    def remove(self, name: str) -> bool:
        """Remove a user; False when there was none of that name."""
        with self._lock:
            lines = dict(self._htpasswd.load())
            found = lines.pop(name, None) is not None
            if found:
                self._htpasswd.save(lines)
            scram = self._scram.load()
            kept = {k: v for k, v in scram.items() if not k.startswith(f"{name}:")}
            if len(kept) != len(scram):
                self._scram.save(kept)
            self._verified.pop(name, None)
        return found

    def names(self) -> list[str]:
        """The users' names, sorted."""
        with self._lock:
            return sorted(self._htpasswd.load())
