"""Cancellation seen inside a long body: ``is_cancelled``, ``raise_if_cancelled``.

A member, a chain step or a group step's continuation asks at a safe point of
its own (between pages, between files) whether its group or chain was
cancelled, and stops there. The answer comes from the running message's labels
(no argument), read from Redis at most once a second per workflow in a worker
process, whatever the number of callers (``FanInContext.cancel_reads``).
"""

from collections.abc import Awaitable, Callable

from taskiq import TaskiqMessage

from taskiq_fanin.chains import record
from taskiq_fanin.chains.cursor import ChainCursor
from taskiq_fanin.context import FanInContext, current_run
from taskiq_fanin.domain.exceptions import NotInTaskBodyError, WorkflowCancelledError
from taskiq_fanin.domain.labels import MemberRef
from taskiq_fanin.domain.results import ChainState
from taskiq_fanin.groups import continuation
from taskiq_fanin.transport.retrying import retrying


async def is_cancelled() -> bool:
    """Whether the group or chain the running task body belongs to was cancelled.

    ``False`` for a task that belongs to none. Raises ``NotInTaskBodyError``
    outside a task body.
    """
    return await _cancelled("is_cancelled()") is not None


async def raise_if_cancelled() -> None:
    """Stop the running body here if its group or chain was cancelled.

    Raises ``WorkflowCancelledError`` (a ``NoResultError``: not retried, no
    result stored), and nothing of the body is recorded: a cancelled group
    counts it neither done nor failed, a cancelled chain runs its
    compensations as for any cancel. ``NotInTaskBodyError`` outside a body.
    While Redis is away it asks again for ``retry_for``, then raises.
    """
    cancelled = await _cancelled("raise_if_cancelled()")
    if cancelled is not None:
        kind, workflow_id = cancelled
        raise WorkflowCancelledError(kind=kind, workflow_id=workflow_id)


async def _cancelled(call: str) -> tuple[str, str] | None:
    """The first cancelled workflow of the running body: (kind, id), or ``None``."""
    running = current_run.get()
    if running is None:
        raise NotInTaskBodyError(call=call)
    ctx, message = running
    for kind, workflow_id, read in _workflows(ctx, message):
        # While Redis is away the read is tried again for retry_for, as the
        # hooks do, then raised: a blip never fails the body.
        def riding(read: Callable[[], Awaitable[bool]] = read) -> Awaitable[bool]:
            return retrying(
                read,
                retry_for=ctx.config.retry_for,
                what=(call, "in a task body"),
                giving_up="%s %s failed while Redis was away; raised in the body",
            )

        if await ctx.cancel_reads.get((kind, workflow_id), riding):
            return kind, workflow_id
    return None


def _workflows(
    ctx: FanInContext, message: TaskiqMessage
) -> list[tuple[str, str, Callable[[], Awaitable[bool]]]]:
    """The group a member is of, and the chain a step is of: how to ask each."""
    asked: list[tuple[str, str, Callable[[], Awaitable[bool]]]] = []
    member = MemberRef.from_labels(message.labels)
    if member is not None:

        async def group_cancelled() -> bool:
            return await continuation.is_cancelled(ctx, member)

        asked.append(("group", member.group_id, group_cancelled))
    cursor = ChainCursor.from_labels(message.labels)
    if cursor is not None:

        async def chain_cancelled() -> bool:
            found = await ctx.chain_scripts.read(record.keys_of(ctx, cursor.id))
            return found.token == cursor.token and found.state is ChainState.CANCELLED

        asked.append(("chain", cursor.id, chain_cancelled))
    return asked
