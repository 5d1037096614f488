"""Pydantic models the library hands out: what continuations receive, and status."""

import enum
from datetime import datetime, timezone

from pydantic import BaseModel, Field, computed_field


class FailurePolicy(str, enum.Enum):
    """What a group's failed members mean for its continuation."""

    #: The continuation runs and sees the failures in its ``GroupResult``.
    CONTINUE = "continue"
    #: If any member failed, the error continuation runs instead (once).
    FAIL = "fail"


class SweepPolicy(str, enum.Enum):
    """What the sweep does with a group still open past its deadline."""

    #: Report it (logged, and returned by the sweep), and look again later.
    REPORT = "report"
    #: Kick again exactly the members that have no outcome yet.
    REDRIVE = "redrive"
    #: Record those members as lost and run the continuation with what arrived.
    GIVE_UP = "give_up"


class GroupState(str, enum.Enum):
    """Life of a group, one way only."""

    #: Members planned (and being dispatched or running).
    OPEN = "open"
    #: The sweep is giving it up: no outcome is recorded any more, and the
    #: members without one are noted lost, a window of the ledger at a time.
    GIVING_UP = "giving_up"
    #: Every member has an outcome (or was given up); one finaliser holds the
    #: lease to dispatch.
    CLAIMED = "claimed"
    #: The continuation (or error continuation, or none) has been enqueued.
    DISPATCHED = "dispatched"
    #: A copy of the continuation is running (it holds the run lease in the meta).
    RUNNING = "running"
    #: The continuation ran to its end; only a small tombstone is left.
    COMPLETED = "completed"
    #: Cancelled before it finalised: no continuation runs.
    CANCELLED = "cancelled"
    #: Redis holds nothing about this group (never planned, or expired).
    MISSING = "missing"


#: The most failed (and lost) members a chain step's error names one by one.
MEMBERS_KEPT = 100


class MemberError(BaseModel):
    """Why a member failed for good."""

    type: str
    message: str


class StepError(MemberError):
    """A chain step's error as its record keeps it.

    A failed group step's names its failed members' own errors and its lost
    members (a task step's names none). Bounded (``chains/tasks.py``): the
    lowest-indexed members only, each message cut short; the counts are in
    ``message``.
    """

    members: dict[int, MemberError] = Field(default_factory=dict)
    lost: list[int] = Field(default_factory=list)


#: The states of a group whose members may still be outstanding: overdue
#: past its deadline (what the sweep counts stuck).
_OUTSTANDING = frozenset({GroupState.OPEN, GroupState.GIVING_UP})


class GroupStatus(BaseModel):
    """A group as Redis holds it right now."""

    group_id: str
    state: GroupState
    total: int = 0
    done: int = 0
    failed: int = 0
    #: Members whose bodies raised ``Skip``: counted toward the group,
    #: neither done nor failed.
    skipped: int = 0
    lost: int = 0
    failure_policy: FailurePolicy | None = None
    sweep_policy: SweepPolicy | None = None
    created: datetime | None = None
    deadline: datetime | None = None
    #: When the group reached its end: its continuation completed (or none was
    #: to run), or it was cancelled. ``None`` while it runs (and in a record
    #: written before finish times were kept).
    finished: datetime | None = None
    planned: bool = False
    redrives: int = 0
    #: The group's window: at most this many members queued or running at once
    #: (``None``: every member was kicked at planning).
    max_in_flight: int | None = None
    #: Of an open group: members released (kicked) without an outcome yet, and
    #: members of a windowed group waiting for a place in its window.
    in_flight: int = 0
    waiting: int = 0
    #: The version it was planned with (``group(..., version=...)``).
    version: str | None = None
    #: Its workflow name (``group(..., name=...)``, else its continuation's or
    #: first member's task name): the ``workflow`` label of its metrics.
    name: str | None = None
    #: Planned with ``open=True``: members may be added until it is sealed.
    planned_open: bool = False
    #: Its total is fixed: no member may be added (a group planned without
    #: ``open=True`` is sealed from the start). Not sealed, it cannot finish.
    sealed: bool = True
    #: Redis's clock when this was read: what its age and ``overdue()`` go by.
    read_at: datetime | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def pending(self) -> int:
        """Members planned but with no outcome yet."""
        return max(self.total - self.done - self.failed - self.skipped - self.lost, 0)

    def age_seconds(self, now: datetime | None = None) -> float | None:
        """Seconds since creation, at ``now`` (default: when read).

        A finished group ages no more: its age is creation to finish.
        """
        if self.created is None:
            return None
        return ((self.finished or self._now(now)) - self.created).total_seconds()

    def overdue(self, now: datetime | None = None) -> bool:
        """True when the group is still open past its deadline, at ``now``.

        Or being given up (``giving_up``: a pass the sweep goes on with at its
        next visit), as the sweep counts it stuck. By default, at Redis's clock
        when the status was read.
        """
        if self.deadline is None or self.state not in _OUTSTANDING:
            return False
        return self._now(now) > self.deadline

    def _now(self, now: datetime | None) -> datetime:
        return now or self.read_at or datetime.now(timezone.utc)


def from_millis(value: int | None) -> datetime | None:
    """Redis keeps times as epoch milliseconds; hand them out as aware datetimes."""
    if value is None:
        return None
    return datetime.fromtimestamp(value / 1000, tz=timezone.utc)


class ChainState(str, enum.Enum):
    """Life of a chain, one way only (``domain/states.py``)."""

    RUNNING = "running"
    DONE = "done"
    #: A step failed for good; its error continuation and compensations are
    #: being kicked (the sweep finishes it if a crash stops that).
    FAILING = "failing"
    FAILED = "failed"
    CANCELLED = "cancelled"
    MISSING = "missing"


class OnErrorState(str, enum.Enum):
    """What became of a chain's error continuation (``on_error``), one way only.

    ``running`` and ``completed`` are the record's own values
    (``states.ON_ERROR_MOVES``).
    """

    #: None to run: the chain has no ``on_error``, or it did not fail (it runs,
    #: or ended done or cancelled), or Redis holds nothing about the chain.
    NONE = "none"
    #: The chain failed, and no copy of its ``on_error`` began: the kick is on
    #: its way (or lost: the sweep's ``on_error_lost`` then).
    PENDING = "pending"
    #: A copy began and has not run to its end: it runs, waits for its retry,
    #: or its worker died (lost once its run lease runs out).
    RUNNING = "running"
    #: A copy ran to its end, its last attempt (it returned, or raised with no
    #: retry left: not a success, a finish): no copy runs again.
    COMPLETED = "completed"


class ChainStatus(BaseModel):
    """A chain as its workflow record holds it right now."""

    chain_id: str
    state: ChainState
    #: Index of the step running, from 0 (or, once over, one past the last that
    #: ran); the CLI's tables count from 1.
    step: int = 0
    steps: int = 0
    step_names: list[str] = Field(default_factory=list)
    started: datetime | None = None
    updated: datetime | None = None
    #: When the chain ended: done, failed (its error continuation and
    #: compensations kicked) or cancelled. ``None`` while it runs or is failing
    #: (and in a record written before finish times were kept).
    finished: datetime | None = None
    failed_step: int | None = None
    #: Why the chain failed: the failed step's error.
    error: MemberError | None = None
    #: A failed group step's failed members, each with its own error (the
    #: lowest-indexed ones, up to a bound), and its lost members.
    failed_members: dict[int, MemberError] = Field(default_factory=dict)
    lost_members: list[int] = Field(default_factory=list)
    #: In a chain that keeps going past failures (compensations): each failed
    #: step's error, by step index.
    failures: dict[int, MemberError] = Field(default_factory=dict)
    #: What became of its ``on_error``: ``none`` without one to run (none, or
    #: the chain did not fail), else ``pending`` until a copy began,
    #: ``running``, then ``completed``.
    on_error_state: OnErrorState = OnErrorState.NONE
    #: When the step it is at counts as stuck: the chain's deadline after the
    #: record last moved or, waiting on a group step that is on time (a
    #: windowed group's deadline slides), that group's deadline (the sweep's
    #: ``chain_stuck`` from then on).
    due: datetime | None = None
    #: The version it was started with (``chain(..., version=...)``).
    version: str | None = None
    #: Its workflow name (``chain(..., name=...)``, else its first step's task
    #: name): the ``workflow`` label of its metrics.
    name: str | None = None
    #: The id of the group its current step is, while it runs one (``None``
    #: otherwise): ``group_handle(broker, step_group_id)`` reads it, and adds
    #: to it and seals it when it was planned with ``open=True``.
    step_group_id: str | None = None
    #: Redis's clock when this was read: what its age and ``overdue()`` go by.
    read_at: datetime | None = None

    def age_seconds(self, now: datetime | None = None) -> float | None:
        """Seconds since the start, at ``now`` (default: when read).

        A finished chain ages no more: its age is start to finish.
        """
        if self.started is None:
            return None
        end = self.finished or now or self.read_at or datetime.now(timezone.utc)
        return (end - self.started).total_seconds()

    def overdue(self, now: datetime | None = None) -> bool:
        """True when the chain still runs, stuck at a step past its deadline."""
        if self.due is None or self.state is not ChainState.RUNNING:
            return False
        return (now or self.read_at or datetime.now(timezone.utc)) >= self.due

    @property
    def current(self) -> str | None:
        """The name of the step the chain is at, while it runs."""
        if self.state is ChainState.RUNNING and self.step < len(self.step_names):
            return self.step_names[self.step]
        return None


class ChainFailure(BaseModel):
    """What a chain's error continuation receives.

    For a group step that failed (policy ``fail``), ``members`` maps each failed
    member's index to its own error and ``lost`` lists the members lost: at most
    ``MEMBERS_KEPT`` of each, the lowest indexes, each message cut to a share of
    ``max_result_bytes`` (``error.message`` has the counts). Empty for a task step.
    """

    chain_id: str
    #: The index of the step that failed, from 0 (as in the chain's steps);
    #: messages for people count from 1.
    step: int
    step_name: str
    error: MemberError
    members: dict[int, MemberError] = Field(default_factory=dict)
    lost: list[int] = Field(default_factory=list)

    @classmethod
    def of_step(
        cls, chain_id: str, step: int, step_name: str, error: StepError
    ) -> "ChainFailure":
        """The failure of ``step`` from the error its chain's record keeps."""
        return cls(
            chain_id=chain_id,
            step=step,
            step_name=step_name,
            error=MemberError(type=error.type, message=error.message),
            members=error.members,
            lost=error.lost,
        )
