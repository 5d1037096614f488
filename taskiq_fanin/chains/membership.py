"""A chain that is a group member counts once it is over: done, failed or cancelled.

The chain's record decides how it ended (one script moves it) and keeps what the
member's outcome is; the member is recorded after that move, by the worker that
made it or, should that worker die first, by a copy of the step delivered again
or by the sweep (:func:`settle_member`). A member recorded twice counts once.
"""

from typing import Any

from taskiq import TaskiqResult

from taskiq_fanin.chains.cursor import ChainCursor
from taskiq_fanin.context import FanInContext
from taskiq_fanin.groups.recording import (
    error_payload,
    outcome_of,
    record_member,
    record_outcome,
)
from taskiq_fanin.model.errors import ChainCancelledError
from taskiq_fanin.model.labels import MemberRef
from taskiq_fanin.model.results import ChainState
from taskiq_fanin.store.records import ChainRecord
from taskiq_fanin.store.replies import Outcome


def member_of(cursor: ChainCursor) -> MemberRef | None:
    """The group member the cursor's chain is, if any."""
    return MemberRef.parse(cursor.member) if cursor.member is not None else None


def kept_outcome(
    ctx: FanInContext, cursor: ChainCursor, result: TaskiqResult[Any]
) -> tuple[str, str]:
    """The member's outcome and payload for the record to keep; ('', '') if none."""
    ref = member_of(cursor)
    if ref is None:
        return "", ""
    outcome, payload = outcome_of(ctx, ref, result)
    return outcome.value, payload


async def end_member(
    ctx: FanInContext, cursor: ChainCursor, result: TaskiqResult[Any], *, delivery: str
) -> None:
    """The chain has ended with ``result``: if it is a group member, record it."""
    ref = member_of(cursor)
    if ref is not None:
        await record_member(ctx, ref, result, delivery=delivery)


async def settle_member(
    ctx: FanInContext, record: ChainRecord, *, delivery: str
) -> None:
    """Record the member outcome a chain's record says, if it is over and a member.

    For whoever finds a chain over without knowing that its member was recorded:
    a redelivered copy of its step, the sweep, a second ``cancel``.
    """
    ref = MemberRef.parse(record.member) if record.member else None
    if ref is None:
        return
    state = record.state
    if state is ChainState.DONE:
        outcome = Outcome(record.outcome or Outcome.DONE.value)
        payload = record.payload
    elif state in (ChainState.FAILING, ChainState.FAILED):
        outcome, payload = Outcome.FAILED, record.error_entry
    elif state is ChainState.CANCELLED:
        outcome = Outcome.FAILED
        payload = error_payload(ChainCancelledError(), ctx.config.max_result_bytes)
    else:
        return  # still running: its step records it when it ends
    await record_outcome(ctx, ref, outcome, payload, delivery=delivery)


def cancelled_result() -> TaskiqResult[Any]:
    """The outcome recorded for a chain member whose chain was cancelled."""
    return TaskiqResult(
        is_err=True,
        log=None,
        return_value=None,
        execution_time=0.0,
        error=ChainCancelledError(),
    )
