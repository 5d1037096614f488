"""The run guard: whether a message's body may run, asked before it runs.

A continuation runs only with its run lease (one copy at a time, none after it
completed); a chain step only while its chain is at it, with the step's lease;
a member of a cancellable group only while the group is not cancelled.
"""

import logging

from taskiq import TaskiqMessage

from taskiq_fanin.chains import record, saga
from taskiq_fanin.chains.cursor import CHAIN_LABEL, ChainCursor
from taskiq_fanin.context import FanInContext
from taskiq_fanin.groups import continuation
from taskiq_fanin.model.labels import (
    CANCELLABLE_LABEL,
    CONTINUATION_LABEL,
    ContinuationRef,
    MemberRef,
    attempt_of,
)
from taskiq_fanin.store.replies import Begin

logger = logging.getLogger("taskiq_fanin")

#: The labels whose message the guard asks Redis about before it runs.
GUARDED = (CONTINUATION_LABEL, CHAIN_LABEL, CANCELLABLE_LABEL)


def applies(labels: dict[str, object]) -> bool:
    """Whether the guard has anything to ask about this message (most have not)."""
    return any(label in labels for label in GUARDED)


async def may_run(ctx: FanInContext, message: TaskiqMessage, *, delivery: str) -> bool:
    """Whether the message's body may run; closes what a cancelled skip leaves."""
    attempt = attempt_of(message.labels)
    ref = ContinuationRef.from_labels(message.labels)
    if ref is not None:
        begun = await continuation.begin(ctx, ref, attempt=attempt, delivery=delivery)
        if begun is not Begin.RUN:
            logger.info("Group %s: continuation skipped (%s)", ref.group_id, begun)
            return False
    cursor = ChainCursor.from_labels(message.labels)
    if cursor is not None:
        begun = await record.begin_step(ctx, cursor, attempt=attempt, delivery=delivery)
        if begun is not Begin.RUN:
            logger.info("Chain %s: step %d skipped", cursor.id, cursor.index)
            if begun is Begin.SKIP:
                await saga.skipped(
                    ctx, cursor, continuation=ref is not None, delivery=delivery
                )
            return False
    if CANCELLABLE_LABEL not in message.labels:
        return True
    member = MemberRef.from_labels(message.labels)
    if member is not None and await continuation.is_cancelled(ctx, member):
        logger.info("Group %s: cancelled; member skipped", member.group_id)
        return False
    return True
