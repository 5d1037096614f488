"""What ``watch`` shows of a group or a chain at one read, and its JSON line.

One read of Redis (``progress()``: O(1) in a group's size) becomes a
:class:`GroupView` or a :class:`ChainView`: the counts, the state, the pace
(outcomes a second, time left), the latest failures and whether the workflow
has reached its end. The live screen and ``--json`` both draw from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from taskiq_fanin.api.control import chain_status, progress
from taskiq_fanin.cli.failures import Failure, LatestFailures, error_text
from taskiq_fanin.domain.results import ChainState, ChainStatus, GroupState
from taskiq_fanin.domain.watching import ChainProgress, GroupProgress
from taskiq_fanin.worker.middleware import FanInMiddleware

#: A group in one of these states has reached its end: its continuation ran
#: (or none was to), it was cancelled, or Redis holds nothing of it any more.
#: Past its members, a group still moves (claimed, dispatched, running) until
#: then, and ``watch`` shows it move.
_GROUP_ENDS = frozenset(
    {GroupState.COMPLETED, GroupState.CANCELLED, GroupState.MISSING}
)
#: A chain in one of these states has reached its end.
_CHAIN_ENDS = frozenset(
    {ChainState.DONE, ChainState.FAILED, ChainState.CANCELLED, ChainState.MISSING}
)


@dataclass(frozen=True)
class GroupView:
    """A group's counts, pace and latest failures at one read."""

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
    percent: float
    #: Every member has an outcome (or was given up), or it was cancelled.
    members_ended: bool
    failures: tuple[Failure, ...] = ()

    @property
    def finished(self) -> int:
        """Members with an outcome, or given up."""
        return self.done + self.failed + self.skipped + self.lost

    @property
    def ended(self) -> bool:
        """The group reached its end: nothing of it moves any more."""
        return self.state in {s.value for s in _GROUP_ENDS}


@dataclass(frozen=True)
class ChainView:
    """A chain's step and state at one read, with its group step's view."""

    chain_id: str
    state: str
    #: The step it is at, counted from 1 (once ended: the last that ran).
    step: int
    steps: int
    step_names: list[str]
    #: Steps that ended done, and failed.
    done: int
    failed: int
    #: The current step's group, while the chain is at a group step.
    group: GroupView | None
    error: str | None

    @property
    def ended(self) -> bool:
        """The chain reached its end: done, failed or cancelled (or is gone)."""
        return self.state in {s.value for s in _CHAIN_ENDS}


View = GroupView | ChainView


def group_view(found: GroupProgress, failures: LatestFailures) -> GroupView:
    """The view of one read of a group."""
    return GroupView(
        group_id=found.group_id,
        state=found.state.value,
        total=found.total,
        done=found.done,
        failed=found.failed,
        skipped=found.skipped,
        lost=found.lost,
        open=found.open,
        in_flight=found.in_flight,
        rate=found.rate,
        eta_seconds=found.eta_seconds,
        percent=found.percent,
        members_ended=found.ended,
        failures=failures.of(found.group_id) if found.failed else (),
    )


def chain_view(
    found: ChainProgress, record: ChainStatus, failures: LatestFailures
) -> ChainView:
    """The view of one read of a chain, and of its group step's group."""
    group = None
    if found.group is not None and found.group.state is not GroupState.MISSING:
        group = group_view(found.group, failures)
    failed = len(record.failures) or int(record.failed_step is not None)
    if record.state is ChainState.DONE:
        ran = record.steps
    elif record.failed_step is not None:
        ran = record.failed_step + 1
    else:
        ran = record.step
    return ChainView(
        chain_id=found.chain_id,
        state=found.state.value,
        step=found.step,
        steps=found.steps,
        step_names=list(found.step_names),
        done=max(min(ran, record.steps) - failed, 0),
        failed=failed,
        group=group,
        error=None if record.error is None else error_text(record.error),
    )


async def read_view(
    fanin: FanInMiddleware, workflow_id: str, failures: LatestFailures
) -> View | None:
    """The group with that id, else the chain; ``None`` when neither exists."""
    found = await progress(fanin, workflow_id)
    if isinstance(found, GroupProgress):
        if found.state is GroupState.MISSING:
            return None
        return group_view(found, failures)
    record = await chain_status(fanin, workflow_id)
    return chain_view(found, record, failures)


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
        "failures": [
            {"index": failure.index, "error": failure.error}
            for failure in view.failures
        ],
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
