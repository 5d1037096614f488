"""How far a group or a chain has come, and each outcome as it is recorded.

``status()`` answers "where is it now"; these answer "how fast, how long
still, and what just happened": ``handle.progress()`` and
``handle.outcomes()``.
"""

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, computed_field

from taskiq_fanin.domain.results import ChainState, GroupState, MemberError

#: What a member's (or a chain step's) outcome can be.
OutcomeState = Literal["done", "failed", "skipped"]

#: A group in one of these states has no member outcome to come.
ENDED_GROUP_STATES = frozenset(GroupState) - {GroupState.OPEN, GroupState.GIVING_UP}
#: A chain in one of these states runs no step any more.
ENDED_CHAIN_STATES = frozenset(
    {ChainState.DONE, ChainState.FAILED, ChainState.CANCELLED, ChainState.MISSING}
)


class GroupProgress(BaseModel):
    """A group's counts, its pace and the time it has left, as Redis holds them now.

    O(1) in the group's size: its meta and three entries of its outcome stream.
    """

    group_id: str
    state: GroupState
    total: int = 0
    #: Members that succeeded (those that skipped are counted in ``skipped``).
    done: int = 0
    failed: int = 0
    skipped: int = 0
    #: Members the sweep gave up on.
    lost: int = 0
    #: Members may still be added: planned with ``open=True`` and not sealed.
    open: bool = False
    #: Of a windowed group: members kicked and without an outcome yet.
    in_flight: int | None = None
    #: Outcomes a second over the last seconds (``None`` until a few ended).
    rate: float | None = None
    #: Seconds left at that rate (``None`` while unknown: too few outcomes,
    #: none lately, or an open group whose total is not fixed yet).
    eta_seconds: float | None = None
    created: datetime | None = None
    deadline: datetime | None = None
    finished: datetime | None = None
    #: Redis's clock when this was read.
    read_at: datetime | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ended(self) -> bool:
        """No member outcome is to come: the group finalised, or was cancelled."""
        return self.state in ENDED_GROUP_STATES

    @computed_field  # type: ignore[prop-decorator]
    @property
    def percent(self) -> float:
        """Members with an outcome (or given up), in percent of the total."""
        if self.total <= 0:
            return 100.0 if self.ended and self.state is not GroupState.MISSING else 0.0
        finished = self.done + self.failed + self.skipped + self.lost
        return round(100.0 * min(finished, self.total) / self.total, 2)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def overdue(self) -> bool:
        """Still open past its deadline, at ``read_at``."""
        if self.ended or self.deadline is None or self.read_at is None:
            return False
        return self.read_at > self.deadline


class ChainProgress(BaseModel):
    """Which step a chain is at, and the progress of a group step."""

    chain_id: str
    state: ChainState
    #: The step running, counted from 1 (once over: the last that ran).
    step: int = 0
    steps: int = 0
    step_names: list[str] = []
    #: The current step's group, while the chain is at a group step.
    group: GroupProgress | None = None
    started: datetime | None = None
    finished: datetime | None = None
    #: Redis's clock when this was read.
    read_at: datetime | None = None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ended(self) -> bool:
        """No step runs any more: done, failed, cancelled (or missing)."""
        return self.state in ENDED_CHAIN_STATES


class MemberOutcome(BaseModel):
    """One member's outcome, as the group's outcome stream recorded it."""

    index: int
    state: OutcomeState
    #: A member that succeeded: its result, as JSON gave it back.
    result: Any = None
    #: A member that failed: its error; one that skipped: ``Skip`` and its reason.
    error: MemberError | None = None
    #: False when its result or error (as JSON) was over 1 KiB: the stream
    #: keeps no more of it (``result`` and ``error`` are None); the
    #: continuation's ``GroupResult`` has it.
    kept: bool = True
    #: ``outcomes(after=cursor)`` resumes after this outcome.
    cursor: str
    #: When it was recorded, on Redis's clock.
    at: datetime


class StepOutcome(BaseModel):
    """One chain step's end, as the chain's record holds it."""

    #: The step, counted from 1.
    step: int
    #: Its task's name, or ``group of N`` for a group step (as ``step_names``).
    name: str
    state: OutcomeState
    error: MemberError | None = None
    #: ``outcomes(after=cursor)`` resumes after this step.
    cursor: str
    #: When the chain's record saw it end (Redis's clock), if known.
    at: datetime | None = None
