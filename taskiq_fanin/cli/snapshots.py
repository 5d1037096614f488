"""What ``watch`` shows of a group or a chain at one read, and its JSON line.

One read of Redis becomes a :class:`GroupView` or a :class:`ChainView`: the
counts, the state, the pace (outcomes a second, time left) and whether the
workflow has ended. The live screen and ``--json`` both draw from them.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from typing import Any

from taskiq_fanin.api.control import group_status, status
from taskiq_fanin.domain.results import (
    ChainState,
    ChainStatus,
    GroupState,
    GroupStatus,
    MemberError,
)
from taskiq_fanin.worker.middleware import FanInMiddleware

#: A group in one of these states has member outcomes to come.
_GROUP_RUNS = frozenset({GroupState.OPEN, GroupState.GIVING_UP})
#: A group in one of these states has reached its end: its continuation ran
#: (or none was to), it was cancelled, or Redis holds nothing of it any more.
#: Past its members, a group still moves (claimed, dispatched, running) until
#: then, and ``watch`` shows it move.
_GROUP_ENDS = frozenset(
    {GroupState.COMPLETED, GroupState.CANCELLED, GroupState.MISSING}
)
#: A chain in one of these states still moves.
_CHAIN_RUNS = frozenset({ChainState.RUNNING, ChainState.FAILING})
#: Seconds of outcomes the rate is measured over.
PACE_WINDOW = 10.0
#: Fewer outcomes than this in the window: no rate yet, it would mislead.
PACE_LEAST = 3


@dataclass(frozen=True)
class GroupView:
    """A group's counts and pace at one read."""

    group_id: str
    state: str
    total: int
    done: int
    failed: int
    skipped: int
    lost: int
    #: Members may still be added (planned ``open=True``, not sealed).
    open: bool
    in_flight: int | None
    rate: float | None
    eta_seconds: float | None

    @property
    def finished(self) -> int:
        """Members with an outcome, or given up."""
        return self.done + self.failed + self.skipped + self.lost

    @property
    def ended(self) -> bool:
        """The group reached its end: nothing of it moves any more."""
        return self.state in {s.value for s in _GROUP_ENDS}

    @property
    def members_ended(self) -> bool:
        """Every member has an outcome (or was given up, or it was cancelled)."""
        return self.state not in {s.value for s in _GROUP_RUNS}

    @property
    def percent(self) -> float:
        """Finished members, in percent of the total."""
        if self.total <= 0:
            return 100.0 if self.members_ended else 0.0
        return round(100.0 * min(self.finished, self.total) / self.total, 2)


@dataclass(frozen=True)
class ChainView:
    """A chain's step and state at one read, with its group step's view."""

    chain_id: str
    state: str
    #: The step it is at, counted from 1 (once ended: the last that ran).
    step: int
    steps: int
    step_names: list[str]
    done: int
    failed: int
    #: The current step's group, while the chain is at a group step.
    group: GroupView | None
    error: str | None
    ended: bool


View = GroupView | ChainView


@dataclass
class Pace:
    """Outcomes a second over the last seconds, from the reads of each group."""

    window: float = PACE_WINDOW
    _seen: dict[str, collections.deque[tuple[float, int]]] = field(default_factory=dict)

    def measure(self, status: GroupStatus) -> tuple[float | None, float | None]:
        """The group's rate and time left, with this read added."""
        if status.read_at is None:
            return None, None
        seen = self._seen.setdefault(status.group_id, collections.deque())
        now = status.read_at.timestamp()
        finished = status.done + status.failed + status.skipped + status.lost
        seen.append((now, finished))
        while len(seen) > 2 and now - seen[1][0] >= self.window:
            seen.popleft()
        (first, before), (last, after) = seen[0], seen[-1]
        if last - first <= 0 or after - before < PACE_LEAST:
            return None, None
        rate = (after - before) / (last - first)
        if status.state not in _GROUP_RUNS or not status.sealed:
            return rate, None  # over, or its total is not fixed yet
        return rate, max(status.total - finished, 0) / rate


def _error(error: MemberError | None) -> str | None:
    if error is None:
        return None
    return f"{error.type}: {error.message}" if error.message else error.type


def group_view(found: GroupStatus, pace: Pace) -> GroupView:
    """The view of one read of a group."""
    rate, eta = pace.measure(found)
    return GroupView(
        group_id=found.group_id,
        state=found.state.value,
        total=found.total,
        done=found.done,
        failed=found.failed,
        skipped=found.skipped,
        lost=found.lost,
        open=not found.sealed,
        in_flight=found.in_flight if found.max_in_flight else None,
        rate=rate,
        eta_seconds=eta,
    )


async def chain_view(
    fanin: FanInMiddleware, found: ChainStatus, pace: Pace
) -> ChainView:
    """The view of one read of a chain, and of its group step's group."""
    group = None
    if found.step_group_id is not None:
        step_group = await group_status(fanin, found.step_group_id)
        if step_group.state is not GroupState.MISSING:
            group = group_view(step_group, pace)
    ended = found.state not in _CHAIN_RUNS
    failed = len(found.failures) or int(found.failed_step is not None)
    ran = found.steps if found.state is ChainState.DONE else found.step
    return ChainView(
        chain_id=found.chain_id,
        state=found.state.value,
        step=min(found.step + 1, found.steps),
        steps=found.steps,
        step_names=list(found.step_names),
        done=max(ran - failed, 0),
        failed=failed,
        group=group,
        error=_error(found.error),
        ended=ended,
    )


async def read_view(
    fanin: FanInMiddleware, workflow_id: str, pace: Pace
) -> View | None:
    """The group with that id, else the chain; ``None`` when neither exists."""
    found = await status(fanin, workflow_id)
    if isinstance(found, GroupStatus):
        if found.state is GroupState.MISSING:
            return None
        return group_view(found, pace)
    return await chain_view(fanin, found, pace)


def _rounded(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def group_doc(view: GroupView) -> dict[str, Any]:
    """A group's view as JSON."""
    return {
        "kind": "group",
        "id": view.group_id,
        "state": view.state,
        "done": view.done,
        "total": view.total,
        "failed": view.failed,
        "skipped": view.skipped,
        "lost": view.lost,
        "percent": view.percent,
        "rate": _rounded(view.rate, 3),
        "eta_seconds": _rounded(view.eta_seconds, 1),
        "open": view.open,
        "in_flight": view.in_flight,
        "ended": view.ended,
    }


def view_doc(view: View) -> dict[str, Any]:
    """One line of ``watch --json``: the view as JSON.

    A chain's ``done``, ``failed`` and ``total`` count its steps; its group
    step's members are in ``group``.
    """
    if isinstance(view, GroupView):
        document = group_doc(view)
    else:
        current = view.step_names[view.step - 1] if view.step else None
        document = {
            "kind": "chain",
            "id": view.chain_id,
            "state": view.state,
            "done": view.done,
            "total": view.steps,
            "failed": view.failed,
            "skipped": 0,
            "step": view.step,
            "steps": view.steps,
            "step_name": current,
            "error": view.error,
            "ended": view.ended,
            "group": None if view.group is None else group_doc(view.group),
        }
    return document


def changed(before: dict[str, Any] | None, after: dict[str, Any]) -> bool:
    """Whether a new line is due: anything but the pace and the time moved."""
    if before is None:
        return True
    pace = {"rate", "eta_seconds"}

    def steady(document: dict[str, Any] | None) -> dict[str, Any] | None:
        if document is None:
            return None
        kept = {k: v for k, v in document.items() if k not in pace}
        if isinstance(kept.get("group"), dict):
            kept["group"] = steady(kept["group"])
        return kept

    return steady(before) != steady(after)
