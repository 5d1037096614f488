"""The run guard: whether a message's body may run, asked before it runs.

A continuation runs only with its run lease (one copy at a time, none after it
completed), and so does a chain's error continuation; a chain step only while
its chain is at it, with the step's lease; a member of a cancellable group only
while the group is not cancelled.
"""

import functools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from taskiq import TaskiqMessage

from taskiq_fanin.chains import error_continuation, launch, record, saga
from taskiq_fanin.chains.cursor import CHAIN_LABEL, ChainCursor
from taskiq_fanin.context import FanInContext
from taskiq_fanin.domain.labels import (
    CANCELLABLE_LABEL,
    CONTINUATION_LABEL,
    ON_ERROR_OF_LABEL,
    ContinuationRef,
    MemberRef,
    OnErrorRef,
    attempt_of,
    takes_over,
)
from taskiq_fanin.engine.leases import Renew
from taskiq_fanin.groups import continuation
from taskiq_fanin.storage.replies import Begin

logger = logging.getLogger("taskiq_fanin")

#: The labels whose message the guard asks Redis about before it runs.
GUARDED = frozenset(
    (CONTINUATION_LABEL, CHAIN_LABEL, ON_ERROR_OF_LABEL, CANCELLABLE_LABEL)
)


def applies(labels: dict[str, object]) -> bool:
    """Whether the guard has anything to ask about this message (most have not)."""
    return not GUARDED.isdisjoint(labels)  # at C speed: asked of every message


@dataclass(frozen=True)
class Verdict:
    """Whether a body may run (``RUN``), and the run leases it then holds."""

    begun: Begin
    leases: list[Renew] = field(default_factory=list)


async def may_run(
    ctx: FanInContext, message: TaskiqMessage, *, delivery: str
) -> Verdict:
    """Whether the message's body may run; closes what a cancelled skip leaves.

    ``RUNNING_ELSEWHERE``: another copy holds the run lease; this one must stay
    unacknowledged, to come back should that copy's worker die.
    """
    leases: list[Renew] = []
    ref = ContinuationRef.from_labels(message.labels)
    if ref is not None:
        continuation_lease = _lease(continuation.begin, ctx, ref, message, delivery)
        begun = await continuation_lease()
        if begun is not Begin.RUN:
            logger.info("Group %s: continuation %s", ref.group_id, _said[begun])
            return Verdict(begun)
        leases.append(continuation_lease)
    failed_chain = OnErrorRef.from_labels(message.labels)
    if failed_chain is not None:
        on_error_lease = _lease(
            error_continuation.begin, ctx, failed_chain, message, delivery
        )
        begun = await on_error_lease()
        if begun is not Begin.RUN:
            logger.info("Chain %s: on_error %s", failed_chain.chain_id, _said[begun])
            return Verdict(begun)
        leases.append(on_error_lease)
    cursor = ChainCursor.from_labels(message.labels)
    if cursor is not None:
        # A group step's continuation begins the step too: its wait was the
        # group's run, not a queue's (the group's duration says it).
        begin_step = functools.partial(record.begin_step, observe_wait=ref is None)
        step_lease = _lease(begin_step, ctx, cursor, message, delivery)
        begun = await step_lease()
        if begun is not Begin.RUN:
            return await _step_not_run(
                ctx, cursor, begun, continuation=ref is not None, delivery=delivery
            )
        leases.append(step_lease)
    if CANCELLABLE_LABEL in message.labels:
        member = MemberRef.from_labels(message.labels)
        if member is not None and await continuation.is_cancelled(ctx, member):
            logger.info("Group %s: cancelled; member skipped", member.group_id)
            return Verdict(Begin.SKIP)
    return Verdict(Begin.RUN, leases)


async def _step_not_run(
    ctx: FanInContext,
    cursor: ChainCursor,
    begun: Begin,
    *,
    continuation: bool,
    delivery: str,
) -> Verdict:
    """A chain step's copy that does not run: what it still has to do."""
    logger.info(  # steps counted from 1, as people do
        "Chain %s: step %d %s", cursor.id, cursor.index + 1, _said[begun]
    )
    if begun is Begin.KICK_NEXT:
        await launch.next_step_again(ctx, cursor)
        return Verdict(Begin.SKIP)
    if begun is Begin.SKIP:
        await saga.skipped(ctx, cursor, continuation=continuation, delivery=delivery)
    return Verdict(begun)


def _lease(
    begin: Callable[..., Awaitable[Begin]],
    ctx: FanInContext,
    ref: object,
    message: TaskiqMessage,
    delivery: str,
) -> Renew:
    """A body's run lease: the same for every kind of body guarded.

    Taken as the message's attempt, taking a held lease over as its labels say.
    """
    return functools.partial(
        begin,
        ctx,
        ref,
        attempt=attempt_of(message.labels),
        delivery=delivery,
        takes_over=takes_over(message.labels),
    )


#: How the log says what the guard found.
_said = {
    Begin.SKIP: "skipped (done, or cancelled)",
    Begin.RUNNING_ELSEWHERE: "running elsewhere: this copy comes back later",
    Begin.RUN: "runs",
    Begin.KICK_NEXT: "skipped (done); its next step never began: its kick checked",
}
