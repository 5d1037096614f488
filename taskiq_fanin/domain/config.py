"""The middleware's options, with their defaults and checks."""

import enum
from dataclasses import dataclass
from datetime import timedelta
from typing import TypeVar

from taskiq_fanin.domain.exceptions import InvalidOptionError, shown
from taskiq_fanin.domain.results import FailurePolicy, SweepPolicy

E = TypeVar("E", bound=enum.Enum)

#: Every key of a group expires after this long, finished or not.
DEFAULT_TTL_SECONDS = 7 * 24 * 3600
#: A group still open this long after planning is stuck (for the sweep).
DEFAULT_DEADLINE_SECONDS = 3600
#: How long a finaliser may take to enqueue the continuation before the sweep may.
DEFAULT_LEASE_SECONDS = 60
#: How long a completed group's meta stays to absorb late duplicates.
DEFAULT_TOMBSTONE_SECONDS = 24 * 3600
#: The widest group one call may plan.
DEFAULT_MAX_GROUP_SIZE = 100_000
#: A group of more members hands its continuation its results by reference
#: (read in pages from Redis): below it the message and the claim stay small
#: (measured from the last member to the continuation's start: inline 6 ms at
#: 200 members, 12 ms at 2,000, 36 ms at 10,000; by reference 6-8 ms at any size,
#: with a message of 500 bytes).
DEFAULT_RESULTS_INLINE_MAX = 500
#: A member result larger than this (as JSON) is not kept; the member still counts.
DEFAULT_MAX_RESULT_BYTES = 64 * 1024
#: How many member kicks a planner keeps in flight at once.
DEFAULT_DISPATCH_CONCURRENCY = 64
#: How many times the sweep may re-drive one group.
DEFAULT_MAX_REDRIVES = 3
#: How deep chains and groups may nest inside each other.
DEFAULT_MAX_DEPTH = 8
#: Key prefix; every key of the library starts with it.
DEFAULT_PREFIX = "fanin"
#: A member whose ledger entry (its arguments, as JSON) is larger is refused.
DEFAULT_MAX_MEMBER_BYTES = 64 * 1024
#: Connections the library's own client opens at most; more callers wait.
DEFAULT_MAX_CONNECTIONS = 32
#: Seconds a Redis command may take before the client counts Redis as away.
DEFAULT_SOCKET_TIMEOUT = 5.0
#: Seconds a worker's hook retries while Redis is away, before it leaves the
#: message unacknowledged to come back.
DEFAULT_RETRY_FOR = 30.0
#: Under ``durability="replicated"``: replicas that must acknowledge a write ...
DEFAULT_REPLICAS = 1
#: ... within this many seconds (Redis's ``WAIT``), or it counts as not done.
DEFAULT_REPLICATION_TIMEOUT = 1.0


class Durability(enum.Enum):
    """When a write counts as done."""

    #: Once the primary acknowledged it (a failover may lose it).
    ACKNOWLEDGED = "acknowledged"
    #: Once ``replicas`` replicas acknowledged it too (``WAIT``), else retried.
    REPLICATED = "replicated"


#: A duration as the options take it: seconds, or a ``timedelta``.
Duration = float | timedelta


def seconds(name: str, value: Duration) -> float:
    """A duration option in seconds (a ``timedelta`` or a number), checked positive."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    return positive(name, value)


def ms(seconds: float) -> int:
    """A duration in seconds as the scripts take it: milliseconds."""
    return int(seconds * 1000)


def check_lifetime(ttl: float, deadline: float, lease: float) -> None:
    """A group must outlive its deadline by the time the sweep needs to act."""
    if ttl < deadline + lease:
        raise InvalidOptionError(
            name="ttl",
            value=shown(ttl),
            reason=f"a group must outlive its deadline ({deadline:g} s) by the "
            f"finaliser lease ({lease:g} s) the sweep needs: raise ttl to at least "
            f"{deadline + lease:g} s or lower the deadline",
        )


def check_replication(replicas: int, timeout: float, socket_timeout: float) -> None:
    """A whole number of replicas; a ``WAIT`` that ends before the socket times out."""
    if not isinstance(replicas, int):
        raise InvalidOptionError(
            name="replicas", value=shown(replicas), reason="a whole number"
        )
    if timeout < 0.001 or timeout >= socket_timeout:
        raise InvalidOptionError(
            name="replication_timeout",
            value=shown(timeout),
            reason=f"from 1 ms to below socket_timeout ({socket_timeout:g} s): "
            "WAIT must answer before the client counts Redis as away",
        )


def positive(name: str, value: float) -> float:
    """Return ``value`` if it is a positive number, else raise a typed error."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise InvalidOptionError(
            name=name, value=shown(value), reason="must be positive"
        )
    return value


@dataclass(frozen=True)
class FanInConfig:
    """Validated middleware options (see ``FanInMiddleware`` for their meaning)."""

    prefix: str = DEFAULT_PREFIX
    ttl: float = DEFAULT_TTL_SECONDS
    deadline: float = DEFAULT_DEADLINE_SECONDS
    lease: float = DEFAULT_LEASE_SECONDS
    tombstone_ttl: float = DEFAULT_TOMBSTONE_SECONDS
    max_group_size: int = DEFAULT_MAX_GROUP_SIZE
    max_result_bytes: int = DEFAULT_MAX_RESULT_BYTES
    results_inline_max: int = DEFAULT_RESULTS_INLINE_MAX
    dispatch_concurrency: int = DEFAULT_DISPATCH_CONCURRENCY
    failure_policy: FailurePolicy = FailurePolicy.CONTINUE
    sweep_policy: SweepPolicy = SweepPolicy.REPORT
    max_redrives: int = DEFAULT_MAX_REDRIVES
    max_depth: int = DEFAULT_MAX_DEPTH
    max_member_bytes: int = DEFAULT_MAX_MEMBER_BYTES
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    socket_timeout: float = DEFAULT_SOCKET_TIMEOUT
    retry_for: float = DEFAULT_RETRY_FOR
    durability: Durability = Durability.ACKNOWLEDGED
    replicas: int = DEFAULT_REPLICAS
    replication_timeout: float = DEFAULT_REPLICATION_TIMEOUT

    def __post_init__(self) -> None:
        if not self.prefix or any(c in self.prefix for c in "{} "):
            raise InvalidOptionError(
                name="prefix",
                value=shown(self.prefix),
                reason="non-empty, no braces/spaces",
            )
        for name in (
            "ttl",
            "deadline",
            "lease",
            "tombstone_ttl",
            "socket_timeout",
            "retry_for",
            "max_group_size",
            "max_result_bytes",
            "results_inline_max",
            "max_member_bytes",
            "dispatch_concurrency",
            "max_depth",
            "max_connections",
            "replicas",
            "replication_timeout",
        ):
            positive(name, getattr(self, name))
        check_lifetime(self.ttl, self.deadline, self.lease)
        if self.durability is Durability.REPLICATED:
            check_replication(
                self.replicas, self.replication_timeout, self.socket_timeout
            )
        if (
            isinstance(self.max_redrives, bool)
            or not isinstance(self.max_redrives, int)
            or self.max_redrives < 0
        ):
            raise InvalidOptionError(
                name="max_redrives",
                value=shown(self.max_redrives),
                reason="must be >= 0",
            )


def choice(name: str, kind: type[E], value: "E | str") -> E:
    """Parse an option that takes one of an enum's values, or raise a typed error."""
    try:
        return kind(value)
    except ValueError:
        raise InvalidOptionError(
            name=name,
            value=shown(value),
            reason="one of " + ", ".join(e.value for e in kind),
        ) from None
