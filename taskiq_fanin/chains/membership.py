"""A chain that is a group member counts once it is over: done, failed or cancelled.

The chain's record decides how it ended (one script moves it) and keeps what the
member's outcome is; the member is recorded after that move, by the worker that
made it or, should that worker die first, by a copy of the step delivered again
or by the sweep (:func:`settle_member`). A member recorded twice counts once.
"""

from dataclasses import dataclass
from typing import Any

from taskiq import TaskiqResult

from taskiq_fanin.chains.cursor import ChainCursor
from taskiq_fanin.context import FanInContext
from taskiq_fanin.domain.exceptions import ChainCancelledError
from taskiq_fanin.domain.labels import MemberRef
from taskiq_fanin.domain.results import ChainState
from taskiq_fanin.groups import recording
from taskiq_fanin.storage.records import ChainRecord
from taskiq_fanin.storage.replies import Outcome


@dataclass(frozen=True, slots=True)
class MemberEnd:
    """The outcome a chain that is a group member records once it is over.

    Made once: the chain's record keeps it, and the member is recorded with it.
    """

    ref: MemberRef
    outcome: Outcome
    payload: str


def member_of(cursor: ChainCursor) -> MemberRef | None:
    """The group member the cursor's chain is, if any."""
    return MemberRef.parse(cursor.member) if cursor.member is not None else None


def member_end(
    ctx: FanInContext,
    cursor: ChainCursor,
    result: TaskiqResult[Any],
    *,
    failure: str = "",
) -> MemberEnd | None:
    """What the chain's member records, the chain over with ``result``; if a member.

    ``failure``: the error payload of a failed ``result``, when the step made it
    already for the chain's record (the same JSON: it is not made again).
    """
    ref = member_of(cursor)
    if ref is None:
        return None
    if result.is_err and failure:
        return MemberEnd(ref, Outcome.FAILED, failure)
    return MemberEnd(ref, *recording.outcome_of(ctx, ref, result))


async def end_member(
    ctx: FanInContext, end: MemberEnd | None, *, delivery: str
) -> None:
    """The chain has ended: if it is a group member, record the outcome it made."""
    if end is not None:
        await recording.record(
            ctx, end.ref, end.outcome, end.payload, delivery=delivery
        )


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
        limit = ctx.config.max_result_bytes
        payload = recording.error_payload(ChainCancelledError(), limit)
    else:
        return  # still running: its step records it when it ends
    await recording.record(ctx, ref, outcome, payload, delivery=delivery)


def cancelled_result() -> TaskiqResult[Any]:
    """The outcome recorded for a chain member whose chain was cancelled."""
    return TaskiqResult(
        is_err=True,
        log=None,
        return_value=None,
        execution_time=0.0,
        error=ChainCancelledError(),
    )
