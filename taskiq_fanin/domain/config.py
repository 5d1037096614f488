"""The middleware's options: declared once, with their defaults and checks.

:class:`FanInConfig` holds every option of ``FanInMiddleware`` under the name
the middleware takes it by, down to the engines; :class:`FanInOptions` says
which values each takes, for the middleware's ``**options`` (a test holds the
two to the same names). Durations are seconds, or a ``timedelta``.
"""

import enum
from collections.abc import Mapping
from datetime import timedelta
from typing import Annotated, Any, TypedDict

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from taskiq_fanin.domain.exceptions import InvalidOptionError, shown
from taskiq_fanin.domain.results import FailurePolicy, SweepPolicy

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
#: A group's outcome stream keeps about this many of its latest outcomes.
DEFAULT_OUTCOME_STREAM_MAX = 10_000
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


class Durability(str, enum.Enum):
    """When a write counts as done."""

    #: Once the primary acknowledged it (a failover may lose it).
    ACKNOWLEDGED = "acknowledged"
    #: Once ``replicas`` replicas acknowledged it too (``WAIT``), else retried.
    REPLICATED = "replicated"


class WaitingGuard(str, enum.Enum):
    """What a task body that awaits another task's result in a worker meets."""

    #: ``WaitingInsideTaskError`` at once (as Celery's ``disable_sync_subtasks``).
    RAISE = "raise"
    #: A warning in the log; the wait goes on (its time is observed).
    WARN = "warn"
    #: Nothing (its time is observed all the same).
    OFF = "off"


#: A duration as the options take it: seconds, or a ``timedelta``.
Duration = float | timedelta


def _in_seconds(value: Any) -> Any:
    """A duration in seconds; a flag or a string is no duration."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool | str):
        raise ValueError("a number of seconds or a timedelta")
    return value


#: A duration option: seconds or a ``timedelta``, kept in seconds, above 0.
Seconds = Annotated[float, BeforeValidator(_in_seconds), Field(gt=0)]
#: A count or a size: a whole number above 0 (a flag or a float is refused).
Positive = Annotated[int, Field(gt=0, strict=True)]


def ms(seconds: float) -> int:
    """A duration in seconds as the scripts take it: milliseconds."""
    return int(seconds * 1000)


def check_lifetime(ttl: float, deadline: float, finaliser_lease: float) -> None:
    """A group must outlive its deadline by the time the sweep needs to act."""
    if ttl < deadline + finaliser_lease:
        raise InvalidOptionError(
            name="ttl",
            value=shown(ttl),
            reason=f"a group must outlive its deadline ({deadline:g} s) by the "
            f"finaliser lease ({finaliser_lease:g} s) the sweep needs: raise ttl "
            f"to at least {deadline + finaliser_lease:g} s or lower the deadline",
        )


def positive(name: str, value: float) -> float:
    """Return ``value`` if it is a positive number, else raise a typed error."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise InvalidOptionError(
            name=name, value=shown(value), reason="must be positive"
        )
    return value


def invalid_option(error: ValidationError) -> InvalidOptionError:
    """The first thing pydantic found wrong, as the typed error naming it."""
    first = error.errors()[0]
    name = ".".join(str(part) for part in first["loc"]) or "options"
    reason = first["msg"].removeprefix("Value error, ")
    return InvalidOptionError(name=name, value=shown(first.get("input")), reason=reason)


class FanInConfig(BaseModel):
    """Every option of ``FanInMiddleware``, checked: the only declaration of them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: First part of every key the library writes (no braces, no spaces).
    prefix: str = DEFAULT_PREFIX
    #: Seconds every key of a group lives, finished or not.
    ttl: Seconds = DEFAULT_TTL_SECONDS
    #: Seconds after which a still-open group (or a chain's step) is stuck.
    deadline: Seconds = DEFAULT_DEADLINE_SECONDS
    #: Seconds the finalising member has to enqueue the continuation (and a
    #: continuation or step body holds its run lease) before a sweep may act.
    finaliser_lease: Seconds = DEFAULT_LEASE_SECONDS
    #: Seconds a completed group's meta is kept so late duplicates change nothing.
    tombstone_ttl: Seconds = DEFAULT_TOMBSTONE_SECONDS
    #: The widest group one call may plan.
    max_group_size: Positive = DEFAULT_MAX_GROUP_SIZE
    #: Member results larger than this (as JSON) are not kept (the member still
    #: counts); error messages are cut to this size.
    max_result_bytes: Positive = DEFAULT_MAX_RESULT_BYTES
    #: A group's outcome stream (``handle.outcomes()``, ``progress()`` 's rate)
    #: keeps about this many of its latest outcomes; 0 keeps none.
    outcome_stream_max: int = Field(
        default=DEFAULT_OUTCOME_STREAM_MAX, ge=0, strict=True
    )
    #: Default for groups: a group of more members hands its continuation a
    #: ``GroupResult`` by reference (read with ``iter_results()``).
    results_inline_max: Positive = DEFAULT_RESULTS_INLINE_MAX
    #: Member kicks a planner keeps in flight.
    dispatch_concurrency: Positive = DEFAULT_DISPATCH_CONCURRENCY
    #: Default for groups: ``continue`` runs the continuation with the failures
    #: in its ``GroupResult``; ``fail`` runs the error continuation instead.
    failure_policy: FailurePolicy = FailurePolicy.CONTINUE
    #: Default for groups: what the sweep does with one still open past its
    #: deadline (``report``, ``redrive``, ``give_up``).
    sweep_policy: SweepPolicy = SweepPolicy.REPORT
    #: How many times the sweep may re-drive one group's members, dispatch its
    #: overdue continuation again, kick a chain's step or its lost ``on_error``
    #: again (each counted on its own).
    max_redrives: int = Field(default=DEFAULT_MAX_REDRIVES, ge=0, strict=True)
    #: How deep groups and chains may nest in each other.
    max_depth: Positive = DEFAULT_MAX_DEPTH
    #: A member whose arguments (as JSON, in the ledger) are larger is refused
    #: before anything is written.
    max_member_bytes: Positive = DEFAULT_MAX_MEMBER_BYTES
    #: Connections the client built from a URL opens at most.
    max_connections: Positive = DEFAULT_MAX_CONNECTIONS
    #: Seconds a command may take before Redis counts as away (the client built
    #: from a URL; also how long ``broker.startup()`` waits for Redis to answer).
    socket_timeout: Seconds = DEFAULT_SOCKET_TIMEOUT
    #: Seconds a worker's hook retries while Redis is away before it leaves its
    #: message unacknowledged, to come back.
    retry_for: Seconds = DEFAULT_RETRY_FOR
    #: ``acknowledged`` (a write is done once the primary took it) or
    #: ``replicated`` (once ``replicas`` replicas did too, within
    #: ``replication_timeout``; fewer, and it is not done: retried).
    durability: Durability = Durability.ACKNOWLEDGED
    #: Under ``replicated``: replicas that must acknowledge each write ...
    replicas: Positive = DEFAULT_REPLICAS
    #: ... within this many seconds (``WAIT``), below ``socket_timeout``.
    replication_timeout: Seconds = DEFAULT_REPLICATION_TIMEOUT
    #: A task body awaiting another task's result in a worker (``wait_result()``,
    #: or the result backend's readiness): ``raise``, ``warn`` or ``off``.
    waiting_guard: WaitingGuard = WaitingGuard.RAISE

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, prefix: str) -> str:
        if not prefix or any(c in prefix for c in "{} "):
            raise ValueError("non-empty, no braces/spaces")
        return prefix

    @model_validator(mode="after")
    def _together(self) -> "FanInConfig":
        check_lifetime(self.ttl, self.deadline, self.finaliser_lease)
        if self.durability is Durability.REPLICATED and not (
            0.001 <= self.replication_timeout < self.socket_timeout
        ):
            raise InvalidOptionError(
                name="replication_timeout",
                value=shown(self.replication_timeout),
                reason=f"from 1 ms to below socket_timeout ({self.socket_timeout:g} "
                "s): WAIT must answer before the client counts Redis as away",
            )
        return self

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> "FanInConfig":
        """The options as keyword arguments, or the typed error naming a bad one."""
        try:
            return cls.model_validate(dict(options))
        except ValidationError as error:
            raise invalid_option(error) from None


class FanInOptions(TypedDict, total=False):
    """The options of :class:`FanInConfig` as ``FanInMiddleware`` takes them."""

    prefix: str
    ttl: Duration
    deadline: Duration
    finaliser_lease: Duration
    tombstone_ttl: Duration
    max_group_size: int
    max_result_bytes: int
    outcome_stream_max: int
    results_inline_max: int
    dispatch_concurrency: int
    failure_policy: FailurePolicy | str
    sweep_policy: SweepPolicy | str
    max_redrives: int
    max_depth: int
    max_member_bytes: int
    max_connections: int
    socket_timeout: Duration
    retry_for: Duration
    durability: Durability | str
    replicas: int
    replication_timeout: Duration
    waiting_guard: WaitingGuard | str
