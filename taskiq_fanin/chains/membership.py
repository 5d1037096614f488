"""A chain that is a group member counts once its last step ends, or fails."""

from typing import Any

from taskiq import TaskiqResult

from taskiq_fanin.chains.cursor import ChainCursor
from taskiq_fanin.context import FanInContext
from taskiq_fanin.groups.recording import record_member
from taskiq_fanin.model.errors import ChainCancelledError
from taskiq_fanin.model.labels import MemberRef


async def end_member(
    ctx: FanInContext, cursor: ChainCursor, result: TaskiqResult[Any], *, delivery: str
) -> None:
    """The chain has ended: if it is a group member, record the member's outcome.

    Recorded before the chain's record moves: should that fail, the step is
    retried or redelivered, and a member's outcome counts once.
    """
    if cursor.member is None:
        return
    ref = MemberRef.parse(cursor.member)
    if ref is not None:
        await record_member(ctx, ref, result, delivery=delivery)


def cancelled_result() -> TaskiqResult[Any]:
    """The outcome recorded for a chain member whose chain was cancelled."""
    return TaskiqResult(
        is_err=True,
        log=None,
        return_value=None,
        execution_time=0.0,
        error=ChainCancelledError(),
    )
