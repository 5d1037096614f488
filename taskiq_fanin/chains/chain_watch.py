"""A chain's progress, and its steps' ends as they come, read from its record.

A chain has a handful of steps: its record says which one runs, which failed,
and when it last moved. A reader polls the record (one bounded read), and
hands out the steps that ended since it last looked; it ends once the chain
does. A group step's progress is that group's (``groups/pace.py``).
"""

import asyncio
from collections.abc import AsyncIterator

from taskiq_fanin.chains import record
from taskiq_fanin.context import FanInContext
from taskiq_fanin.domain.exceptions import (
    ChainNotFoundError,
    InvalidOptionError,
    shown,
)
from taskiq_fanin.domain.results import ChainState, ChainStatus
from taskiq_fanin.domain.watching import (
    ENDED_CHAIN_STATES,
    ChainProgress,
    OutcomeState,
    StepOutcome,
)
from taskiq_fanin.groups.pace import group_progress
from taskiq_fanin.storage.keys import validate_chain_id

#: How often a reader looks at the chain's record again (seconds).
POLL_SECONDS = 0.25


async def chain_progress(ctx: FanInContext, chain_id: str) -> ChainProgress:
    """Which step the chain is at (from 1), and its group step's progress."""
    status = await record.status(ctx, chain_id)
    group = None
    if status.step_group_id is not None:
        group = await group_progress(ctx, status.step_group_id)
    return ChainProgress(
        chain_id=chain_id,
        state=status.state,
        step=min(status.step + 1, status.steps) if status.steps else 0,
        steps=status.steps,
        step_names=status.step_names,
        group=group,
        started=status.started,
        finished=status.finished,
        read_at=status.read_at,
    )


def ended_steps(status: ChainStatus) -> int:
    """How many of the chain's steps have ended, from the first."""
    if status.state is ChainState.DONE:
        return status.steps
    failed = status.state in (ChainState.FAILING, ChainState.FAILED)
    if failed and status.failed_step is not None:
        return min(status.failed_step + 1, status.steps)
    return min(status.step, status.steps)


def step_outcome(status: ChainStatus, index: int) -> StepOutcome:
    """Step ``index`` (from 0) of a chain that has ended it."""
    error = status.failures.get(index)
    state: OutcomeState = "done"
    if index == status.failed_step:
        state, error = "failed", status.error
    elif error is not None:
        state = "failed"
    names = status.step_names
    name = names[index] if index < len(names) else ""
    last = index == ended_steps(status) - 1
    return StepOutcome(
        step=index + 1,
        name=name,
        state=state,
        error=error,
        cursor=str(index + 1),
        at=status.updated if last else None,
    )


def checked_step_cursor(after: str | None) -> int:
    """A reader's ``after=``: a step's cursor (its number), or ``None``."""
    if after is None:
        return 0
    if not isinstance(after, str) or not (after.isascii() and after.isdigit()):
        raise InvalidOptionError(
            name="after",
            value=shown(after),
            reason="a cursor a step outcome gave (its .cursor), or None for the start",
        )
    return int(after)


def follow(
    ctx: FanInContext, chain_id: str, *, after: str | None = None
) -> AsyncIterator[StepOutcome]:
    """Each step's end after ``after``, until the chain ends.

    A bad id or cursor raises here; the iteration raises
    ``ChainNotFoundError`` when Redis holds no such chain.
    """
    validate_chain_id(chain_id, derived=True)
    return _follow(ctx, chain_id, checked_step_cursor(after))


async def _follow(
    ctx: FanInContext, chain_id: str, seen: int
) -> AsyncIterator[StepOutcome]:
    known = False
    while True:
        status = await record.status(ctx, chain_id)
        if status.state is ChainState.MISSING:
            if known:
                return  # it ended and expired meanwhile
            raise ChainNotFoundError(chain_id=chain_id)
        known = True
        ended = ended_steps(status)
        for index in range(seen, ended):
            yield step_outcome(status, index)
        seen = max(seen, ended)
        if status.state in ENDED_CHAIN_STATES:
            return
        await asyncio.sleep(POLL_SECONDS)
