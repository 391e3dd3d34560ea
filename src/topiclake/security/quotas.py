"""Client quotas per principal, as Kafka's: produce bytes/s, fetch bytes/s and requests/s.

One token bucket per (principal, kind). A bucket holds up to one second of its rate (the burst); what a
principal sends or reads is taken from it after the fact and may drive it into debt, exactly as Kafka
records usage first and throttles afterwards. A principal in debt must wait until the debt is paid back at
its rate: that wait is the throttle time. The listeners decide what a throttle means (docs/quotas.md):
HTTP answers 429 with ``Retry-After`` *before* reading anything of a request while the principal is in
debt (so nothing accepted is ever dropped); the Kafka listener answers with ``throttle_time_ms`` and holds
the answer back that long, as Kafka brokers do.

Limits, most specific first: a user's quotas in ``_system/quotas`` (:mod:`.quota_table`, set with
``topiclake quotas set``, Kafka's ``kafka-configs --entity-type users`` or AlterClientQuotas; applied by
:meth:`Quotas.configure`), the deprecated per-principal overrides of the setting ``quota_overrides``, the
default user's quotas in ``_system/quotas``, the settings ``quota_*`` (0 = unlimited). Accounting is a few
float operations under one lock per request, never per record.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from topiclake.errors import InvalidConfig

__all__ = ["QuotaKind", "QuotaLimits", "Quotas", "quotas_from_settings"]

logger = logging.getLogger(__name__)


class QuotaKind(StrEnum):
    """What a quota limits (Kafka's ``producer_byte_rate``, ``consumer_byte_rate``, request rate)."""

    PRODUCE = "produce_bytes_per_s"
    FETCH = "fetch_bytes_per_s"
    REQUEST = "request_rate"


@dataclass(frozen=True)
class QuotaLimits:
    """A principal's limits; 0 means unlimited."""

    produce_bytes_per_s: float = 0.0
    fetch_bytes_per_s: float = 0.0
    request_rate: float = 0.0

    def rate(self, kind: QuotaKind) -> float:
        """The limit of one kind (0 = unlimited)."""
        return float(getattr(self, kind.value))

    @property
    def unlimited(self) -> bool:
        """Whether no kind is limited."""
        return all(self.rate(k) <= 0 for k in QuotaKind)

    @classmethod
    def parse(cls, raw: Mapping[str, float], base: QuotaLimits | None = None) -> QuotaLimits:
        """Limits from a mapping of :class:`QuotaKind` values, the kinds it omits taken from ``base``.

        Raises:
            ValueError: An unknown kind or a negative limit.
        """
        known = {k.value for k in QuotaKind}
        unknown = set(raw) - known
        if unknown:
            raise ValueError(f"unknown quota {sorted(unknown)}; known: {sorted(known)}")
        if any(float(v) < 0 for v in raw.values()):
            raise ValueError("quotas must be >= 0 (0 = unlimited)")
        base = base or cls()
        return cls(**{k: float(raw.get(k, getattr(base, k))) for k in known})


@dataclass
class _Bucket:
    tokens: float
    stamp: float


@dataclass
class Quotas:
    """Token buckets per principal; thread-safe.

    Args:
        default: Limits of every principal without an override.
        overrides: Principal (``"User:alice"``) -> its limits.
        burst_s: Seconds of rate a bucket holds (what an idle principal may send at once).
        clock: Monotonic seconds (tests pass their own).
    """

    default: QuotaLimits = field(default_factory=QuotaLimits)
    overrides: Mapping[str, QuotaLimits] = field(default_factory=dict)
    burst_s: float = 1.0
    clock: Callable[[], float] = time.monotonic
    #: Whether any principal has any limit (listeners skip all accounting otherwise); asked on every
    #: request, so kept up to date by :meth:`configure` rather than worked out each time.
    enabled: bool = field(default=False, init=False)
    _default: QuotaLimits = field(default_factory=QuotaLimits, init=False, repr=False)
    _limits: Mapping[str, QuotaLimits] = field(default_factory=dict, init=False, repr=False)
    _buckets: dict[tuple[str, str, QuotaKind], _Bucket] = field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        self.configure({})

    def configure(self, configured: Mapping[str | None, Mapping[QuotaKind, float]]) -> None:
        """Apply the quotas of ``_system/quotas``: principal (None: the default user) -> kind -> limit.

        A principal's configured kinds win over its ``overrides`` entry, which wins over the default
        user's configured kinds, which win over :attr:`default`. Buckets keep their state; a new rate
        applies from the next request.
        """
        default = _overlay(self.default, configured.get(None, {}))
        limits = dict(self.overrides)
        for principal, kinds in configured.items():
            if principal is not None:
                limits[principal] = _overlay(limits.get(principal, default), kinds)
        self._default, self._limits = default, limits  # swapped whole: readers need no lock
        self.enabled = not default.unlimited or any(not o.unlimited for o in limits.values())

    def limits(self, principal: str) -> QuotaLimits:
        """The limits of a principal."""
        return self._limits.get(principal, self._default)

    def _bucket(self, principal: str, client: str, kind: QuotaKind, rate: float, now: float) -> _Bucket:
        burst = rate * self.burst_s
        bucket = self._buckets.get((principal, client, kind))
        if bucket is None:
            if len(self._buckets) > 10_000:
                self._forget_idle(now)
            bucket = self._buckets[(principal, client, kind)] = _Bucket(burst, now)
        else:
            bucket.tokens = min(burst, bucket.tokens + (now - bucket.stamp) * rate)
            bucket.stamp = now
        return bucket

    def _forget_idle(self, now: float) -> None:
        # a bucket refilled to its burst holds no state worth keeping
        for key, b in list(self._buckets.items()):
            rate = self.limits(key[0]).rate(key[2])
            if rate <= 0 or b.tokens + (now - b.stamp) * rate >= rate * self.burst_s:
                del self._buckets[key]

    def throttle_ms(self, principal: str, kind: QuotaKind, client: str = "") -> int:
        """How long ``principal`` must wait before more of ``kind`` is accepted (0: go ahead).

        ``client`` splits one principal's buckets (the listeners pass the client's host for
        ``User:ANONYMOUS``, so that on an open broker one client's excess never throttles another).
        """
        rate = self.limits(principal).rate(kind)
        if rate <= 0:
            return 0
        with self._lock:
            bucket = self._bucket(principal, client, kind, rate, self.clock())
            return _debt_ms(bucket.tokens, rate)

    def record(self, principal: str, kind: QuotaKind, amount: float, client: str = "") -> int:
        """Count ``amount`` (bytes, or 1 request) for ``principal``; return the throttle time it leaves."""
        rate = self.limits(principal).rate(kind)
        if rate <= 0 or amount <= 0:
            return 0
        with self._lock:
            bucket = self._bucket(principal, client, kind, rate, self.clock())
            bucket.tokens -= amount
            return _debt_ms(bucket.tokens, rate)

    def worst_throttle_ms(self, principal: str, kinds: tuple[QuotaKind, ...], client: str = "") -> int:
        """The longest throttle of ``principal`` over ``kinds``."""
        return max((self.throttle_ms(principal, k, client) for k in kinds), default=0)


def _overlay(base: QuotaLimits, kinds: Mapping[QuotaKind, float]) -> QuotaLimits:
    return replace(base, **{k.value: float(v) for k, v in kinds.items()}) if kinds else base


def _debt_ms(tokens: float, rate: float) -> int:
    return 0 if tokens >= 0 else math.ceil(-tokens / rate * 1000)


def quotas_from_settings(
    produce_bytes_per_s: float,
    fetch_bytes_per_s: float,
    request_rate: float,
    overrides: Mapping[str, Mapping[str, float]],
) -> Quotas:
    """Quotas from the gateway's settings (``quota_*``, ``quota_overrides``).

    Raises:
        InvalidConfig: An override names an unknown quota or a negative limit.
    """
    default = QuotaLimits(float(produce_bytes_per_s), float(fetch_bytes_per_s), float(request_rate))
    if overrides:
        logger.warning(
            "quota_overrides (TOPICLAKE_QUOTA_OVERRIDES) is deprecated: it still applies, but set quotas "
            "per user with `topiclake quotas set` or AlterClientQuotas (_system/quotas, docs/quotas.md); "
            "a user's quotas there win over its entry here"
        )
    parsed = {}
    for principal, raw in overrides.items():
        try:
            parsed[principal] = QuotaLimits.parse(raw, default)
        except (ValueError, TypeError) as exc:
            raise InvalidConfig(f"quota_overrides[{principal!r}]: {exc}", principal=principal) from None
    return Quotas(default, parsed)
