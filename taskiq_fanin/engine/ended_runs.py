"""What a run that ended leaves to record, each part once, however retried.

A member's outcome, a chain's transition, a continuation's (or a chain's error
continuation's) completion: each part once, even when the whole is retried
after Redis was away. A member's outcome is made once, by the group engine,
and handed back to it to record with the same delivery every try.
"""

from taskiq_fanin.chains import error_continuation, progress, record, saga
from taskiq_fanin.chains.cursor import CHAIN_LABEL, ChainCursor
from taskiq_fanin.context import FanInContext, new_delivery
from taskiq_fanin.domain.labels import (
    CONTINUATION_LABEL,
    ON_ERROR_OF_LABEL,
    ContinuationRef,
    MemberRef,
    OnErrorRef,
)
from taskiq_fanin.engine.events import Ending, RunEnded
from taskiq_fanin.engine.leases import Held
from taskiq_fanin.groups import continuation, recording

#: The labels of a message that is no member but has an end to record.
_RECORDED = frozenset((CONTINUATION_LABEL, CHAIN_LABEL, ON_ERROR_OF_LABEL))


class EndedRun:
    """What one ended run records; each part once, if retried.

    The same delivery id goes with every try, so a transition whose reply was
    lost (Redis restarted, a timeout) is carried on, not taken for a duplicate.
    """

    def __init__(
        self,
        ctx: FanInContext,
        event: RunEnded,
        member: MemberRef | None,
        *,
        began_as: Held | None = None,
    ) -> None:
        self.ctx, self.message, self.result = ctx, event.message, event.result
        self.member = member
        self.ending = event.ending
        #: The member's outcome and payload, made once for every try.
        self.outcome = (
            recording.outcome_of(ctx, member, event.result)
            if member is not None and event.ending is Ending.RAN
            else None
        )
        self.delivery = new_delivery()
        #: What the guard began the body as (its leases' holder, its attempt).
        self.began_as = began_as
        #: Parts recorded by an earlier try: not recorded again.
        self.member_recorded = self.chain_carried = False

    @staticmethod
    def applies(labels: dict[str, object]) -> bool:
        """Whether a message that is no member has anything to record."""
        return not _RECORDED.isdisjoint(labels)

    async def record(self) -> None:
        """Record what is left to record (the whole, the first time)."""
        ctx, labels, delivery = self.ctx, self.message.labels, self.delivery
        ref = ContinuationRef.from_labels(labels)
        cursor = ChainCursor.from_labels(labels)
        failed_chain = OnErrorRef.from_labels(labels)
        if self.ending is Ending.SKIPPED:
            return
        if self.ending is Ending.CANCELLED:
            if cursor is not None:  # as a copy the guard skipped at the cancel
                await saga.skipped(
                    ctx, cursor, continuation=ref is not None, delivery=delivery
                )
            return
        if self.ending is Ending.REPEATED:
            await self._release(ref, cursor, failed_chain)
            return
        member, made = self.member, self.outcome
        if member is not None and made is not None and not self.member_recorded:
            outcome, payload = made
            await recording.record(ctx, member, outcome, payload, delivery=delivery)
            self.member_recorded = True
        # A chain is carried on before the group whose continuation this step
        # is completes: a crash in between leaves it to be redelivered.
        if cursor is not None and not self.chain_carried:
            await progress.step_finished(ctx, cursor, self.result, delivery=delivery)
            self.chain_carried = True
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
