"""What a sweep reports: its findings, each with what was done about it."""

import enum
import logging
from typing import Any

from pydantic import BaseModel, Field

logger = logging.getLogger("taskiq_fanin.sweep")


class FindingKind(str, enum.Enum):
    """Why a group needs attention."""

    #: Open past its deadline; every member was dispatched.
    STUCK = "stuck"
    #: Open past its deadline, and its planner never finished dispatching.
    UNPLANNED = "unplanned"
    #: Planned with ``open=True``, open past its deadline and not sealed:
    #: nothing finishes it before ``handle.seal()`` (a give-up seals it with
    #: what it has).
    UNSEALED = "unsealed"
    #: Claimed, but the finaliser's lease ran out before it dispatched.
    FINALISER_LOST = "finaliser_lost"
    #: The continuation was dispatched but has not completed by its deadline.
    CONTINUATION_OVERDUE = "continuation_overdue"
    #: The index names a group that expired or completed: the entry is pruned.
    GONE = "gone"
    #: A chain still running whose step has not moved within its span (the
    #: chain's deadline, counted from when its record last moved).
    CHAIN_STUCK = "chain_stuck"
    #: A chain whose failure was recorded, but whose error continuation and
    #: compensations were not all kicked (its worker died in between).
    CHAIN_FAILING = "chain_failing"
    #: A failed chain whose error continuation has not run to its end: the
    #: running copy's run lease ran out (its worker died), or no copy began
    #: within a step span of the failure (on a broker that never redelivers).
    ON_ERROR_LOST = "on_error_lost"


class SweepAction(str, enum.Enum):
    """What the sweep did (or, in a dry run, would do) about a finding."""

    REPORT = "report"
    REDRIVE = "redrive"
    GIVE_UP = "give_up"
    REDISPATCH = "redispatch"
    PRUNE = "prune"
    #: Kick a failing chain's error continuation and compensations, end it.
    FINISH = "finish"


class Finding(BaseModel):
    """One group (or chain) the sweep found, and what it did about it."""

    #: The group's id, or the chain's for ``chain_stuck``, ``chain_failing``
    #: and ``on_error_lost``.
    group_id: str
    kind: FindingKind
    action: SweepAction
    #: False in a dry run, and when the action found nothing left to do.
    applied: bool
    #: The group's (or chain's) state.
    state: str
    total: int = 0
    done: int = 0
    failed: int = 0
    #: How many members have no outcome yet.
    missing_count: int = 0
    #: Some of them (at most 20, lowest first): those of the ledger window
    #: this visit went over (where a re-drive pass is, else the first).
    missing: list[int] = Field(default_factory=list)
    age_seconds: float = 0.0
    overdue_seconds: float = 0.0
    #: How many times the sweep re-drove it: a group's members, a chain's
    #: step; of ``continuation_overdue`` and ``on_error_lost``, the
    #: continuation's re-dispatches (at most ``max_redrives`` each).
    redrives: int = 0
    #: Tasks the sweep's broker does not know (its workers would drop them):
    #: the members or the chain step that run them were not re-driven.
    unknown_tasks: list[str] = Field(default_factory=list)
    #: Of a chain stuck at a task step: whether a copy of it ever began
    #: (``False``: kicked and never started, as when no worker knows its task:
    #: taskiq drops such a message unrun); ``None`` for anything else.
    started: bool | None = None
    note: str = ""

    def capped(self, not_again: str, used: str) -> None:
        """Its re-kicks are used up (``max_redrives``): reported only, as its note says.

        ``not_again``: what is not done again ("kicked"); ``used``: how many of
        what were spent ("3 re-kicks").
        """
        self.action = SweepAction.REPORT
        note = (
            f"not {not_again} again: {used} used (max_redrives);"
            " it runs only if a copy of it still comes"
        )
        self.note = "; ".join(filter(None, (self.note, note)))


class SweepReport(BaseModel):
    """What one sweep examined and found."""

    dry_run: bool
    #: True when another sweep held the lock: this one did nothing.
    skipped: bool = False
    examined: int = 0
    #: False when the sweep's broker knows none of the user's tasks (or there is
    #: no broker: the CLI given only --redis-url): tasks unknown to the workers
    #: cannot be told, and a re-drive kicks what the ledger or record holds.
    tasks_checked: bool = True
    findings: list[Finding] = Field(default_factory=list)

    @property
    def stuck(self) -> list[Finding]:
        """Findings about groups and chains that stopped moving."""
        return [finding for finding in self.findings if finding.kind in STUCK_KINDS]


#: The findings that count as stuck (for the gauge, --fail-on-stuck, alerts).
#: A lost ``on_error`` counts: it stopped moving as much as a stuck chain.
STUCK_KINDS = (
    FindingKind.STUCK,
    FindingKind.UNPLANNED,
    FindingKind.UNSEALED,
    FindingKind.CHAIN_STUCK,
    FindingKind.ON_ERROR_LOST,
)


#: The findings about a chain (their note says where it is).
CHAIN_KINDS = (
    FindingKind.CHAIN_STUCK,
    FindingKind.CHAIN_FAILING,
    FindingKind.ON_ERROR_LOST,
)


def log_finding(finding: Finding) -> None:
    """One warning per finding, its fields as ``fanin_*`` extras.

    A chain's says where it is, as its note does (steps counted from 1).
    """
    fields: dict[str, Any] = {f"fanin_{k}": v for k, v in finding.model_dump().items()}
    action = ("" if finding.applied else "would ") + finding.action.value
    if finding.kind in CHAIN_KINDS:
        logger.warning(
            "Chain %s %s: %s (%s)",
            finding.group_id,
            finding.kind.value,
            action,
            finding.note,
            extra=fields,
        )
        return
    logger.warning(
        "Group %s %s: %s (%d/%d done, %d failed, missing %s)%s",
        finding.group_id,
        finding.kind.value,
        action,
        finding.done,
        finding.total,
        finding.failed,
        finding.missing[:20],
        f"; {finding.note}" if finding.note else "",
        extra=fields,
    )
