"""What a worker records when a message's body has run.

A member's outcome, a chain's transition, a continuation's (or a chain's error
continuation's) completion: each part once, even when the whole is retried
after Redis was away. A member's outcome is made here, once, and handed to the
group engine to record.
"""

from typing import Any

from taskiq import TaskiqMessage, TaskiqResult

from taskiq_fanin.chains import error_continuation, progress, record
from taskiq_fanin.chains.cursor import CHAIN_LABEL, ChainCursor
from taskiq_fanin.context import FanInContext, new_delivery
from taskiq_fanin.domain.labels import (
    CONTINUATION_LABEL,
    ON_ERROR_OF_LABEL,
    ContinuationRef,
    MemberRef,
    OnErrorRef,
)
from taskiq_fanin.groups import continuation
from taskiq_fanin.groups import recording as member_recording
from taskiq_fanin.worker.ending import Ending
from taskiq_fanin.worker.leases import Held


class Recording:
    """What ``post_execute`` records for one message; each part once, if retried.

    The same delivery id goes with every try, so a transition whose reply was
    lost (Redis restarted, a timeout) is carried on, not taken for a duplicate.
    """

    def __init__(
        self,
        ctx: FanInContext,
        message: TaskiqMessage,
        result: TaskiqResult[Any],
        member: MemberRef | None,
        *,
        ending: Ending,
        began_as: Held | None = None,
    ) -> None:
        self.ctx, self.message, self.result = ctx, message, result
        self.member = member
        self.ending = ending
        #: The member's outcome and payload, made once for every try.
        self.outcome = (
            member_recording.outcome_of(ctx, member, result)
            if member is not None and ending is Ending.RAN
            else None
        )
        self.delivery = new_delivery()
        #: What the guard began the body as (its leases' holder, its attempt).
        self.began_as = began_as
        self.done: set[str] = set()

    @staticmethod
    def applies(labels: dict[str, object]) -> bool:
        """Whether a message that is no member has anything to record."""
        return any(
            label in labels
            for label in (CONTINUATION_LABEL, CHAIN_LABEL, ON_ERROR_OF_LABEL)
        )

    async def run(self) -> None:
        """Record what is left to record (the whole, the first time)."""
        ctx, labels, delivery = self.ctx, self.message.labels, self.delivery
        ref = ContinuationRef.from_labels(labels)
        cursor = ChainCursor.from_labels(labels)
        failed_chain = OnErrorRef.from_labels(labels)
        if self.ending is Ending.SKIPPED:
            return
        if self.ending is Ending.REPEATED:
            await self._release(ref, cursor, failed_chain)
            return
        member, made = self.member, self.outcome
        if member is not None and made is not None and "member" not in self.done:
            outcome, payload = made
            await member_recording.record(
                ctx, member, outcome, payload, delivery=delivery
            )
            self.done.add("member")
        # A chain is carried on before the group whose continuation this step
        # is completes: a crash in between leaves it to be redelivered.
        if cursor is not None and "chain" not in self.done:
            await progress.step_finished(ctx, cursor, self.result, delivery=delivery)
            self.done.add("chain")
        if ref is not None:
            await continuation.complete(ctx, ref)
        if failed_chain is not None:
            await error_continuation.complete(ctx, failed_chain)

    async def _release(
        self,
        ref: ContinuationRef | None,
        cursor: ChainCursor | None,
        failed_chain: OnErrorRef | None,
    ) -> None:
        """An attempt to be retried gives up the leases it holds.

        Its retry is on the way (it takes a lease over if it starts first); a
        redelivery of this attempt may run once released. Released as the
        guard's delivery: applied again (its reply lost), a release frees no
        copy begun since. As the attempt it began as: the retry middleware
        has raised the message's count by now.
        """
        ctx, began_as = self.ctx, self.began_as
        if began_as is None:
            return  # it held no lease here
        delivery, attempt = began_as
        if ref is not None:
            await continuation.release(ctx, ref, attempt=attempt, delivery=delivery)
        if cursor is not None:
            await record.release_step(ctx, cursor, attempt=attempt, delivery=delivery)
        if failed_chain is not None:
            await error_continuation.release(
                ctx, failed_chain, attempt=attempt, delivery=delivery
            )
