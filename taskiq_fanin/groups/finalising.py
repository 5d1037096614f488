"""Enqueueing a completed group's continuation, exactly once (invariants 3, 4).

The member that completes its group finalises it, with the outcomes its claim
returned; the sweep finalises for a claimant that died.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable

from redis.exceptions import RedisError

from taskiq_fanin import metrics
from taskiq_fanin.context import FanInContext
from taskiq_fanin.domain.config import ms
from taskiq_fanin.domain.group_result import GroupResult, ResultsReference
from taskiq_fanin.domain.labels import ContinuationRef, retry_labels
from taskiq_fanin.domain.results import FailurePolicy, MemberError
from taskiq_fanin.domain.signature import Signature
from taskiq_fanin.groups import group_index
from taskiq_fanin.groups.group_durations import group_ended
from taskiq_fanin.storage.keys import GroupKeys
from taskiq_fanin.storage.replies import CollectedOutcomes

logger = logging.getLogger("taskiq_fanin")


def build_result(
    group_id: str, collected: CollectedOutcomes, *, token: str
) -> GroupResult:
    """The ``GroupResult`` a continuation receives: inline, or by reference."""
    if collected.by_reference:
        reference = ResultsReference(
            token=token,
            done=collected.done_count - collected.skipped_count,
            failed=collected.failed_count,
            lost=collected.lost_count,
            skipped=collected.skipped_count,
        )
        return GroupResult(
            group_id=group_id, total=collected.total, reference=reference
        )
    # Skipped members are among the done ones: not succeeded.
    succeeded = [index for index in collected.done if index not in collected.skipped]
    return GroupResult(
        group_id=group_id,
        total=collected.total,
        succeeded=succeeded,
        results=[collected.results.get(index) for index in succeeded],
        skipped={index: str(reason) for index, reason in collected.skipped.items()},
        failed={
            index: MemberError.model_validate(collected.errors[index])
            if index in collected.errors
            else MemberError(type="UnknownError", message="")
            for index in collected.failed
        },
        lost=collected.lost,
    )


def choose_continuation(
    collected: CollectedOutcomes, result: GroupResult
) -> tuple[str, Signature | None]:
    """By the failure policy: ('then' | 'on_error' | 'none', signature to kick)."""
    failing = result.failed_count or result.lost_count
    if failing and collected.failure_policy == FailurePolicy.FAIL.value:
        kind, encoded = "on_error", collected.on_error
    else:
        kind, encoded = "then", collected.then
    if not encoded:
        return "none", None
    return kind, Signature.from_ledger(encoded)


async def finalise(
    ctx: FanInContext,
    group_id: str,
    token: str,
    *,
    claimant: str,
    collected: CollectedOutcomes | None = None,
    attempt: int = 0,
    kicked: Callable[[], Awaitable[object]] | None = None,
) -> None:
    """Enqueue the continuation of a claimed group, then release the claim.

    Called by the member that claimed the finaliser lease (with the ``collected``
    outcomes its claim returned), and by the sweep when a lease ran out before
    the dispatch was recorded (or a continuation is overdue); the deterministic
    task id and ``beginContinuation`` keep a second dispatch from running twice.
    ``claimant`` is the lease's holder: the lease is released if it still is.
    ``attempt``: the retry middlewares' count the continuation goes as (the
    sweep's re-dispatch: the attempt after the one recorded). ``kicked``:
    awaited once the continuation's kick returned, before the dispatch is
    recorded (the sweep counts its re-dispatch there: a copy that went is
    counted even when recording the dispatch then fails).
    """
    keys = GroupKeys(ctx.config.prefix, group_id)
    if collected is None:
        collected = await ctx.scripts.collect_outcomes(keys, token=token)
        if collected is None:
            logger.warning("Group %s vanished before it could be finalised", group_id)
            return
    result = build_result(group_id, collected, token=token)
    kind, continuation = choose_continuation(collected, result)
    # The rescore is only a hint for the sweep: it goes beside the kick. The
    # kick goes from this task, at once (a task of its own, or a batch, would
    # first wait for every other the loop has ready: members' acks).
    rescoring = asyncio.ensure_future(_rescore_to_lease_end(ctx, group_id))
    try:
        await _kick_continuation(
            ctx,
            ContinuationRef(group_id=group_id, token=token, kind=kind),
            continuation,
            result,
            attempt=attempt,
        )
    finally:
        await rescoring
    if kicked is not None and continuation is not None:
        await kicked()
    dispatched = await ctx.scripts.mark_dispatched(
        keys,
        token=token,
        dispatched=kind,
        tombstone_ms=ms(ctx.config.tombstone_ttl),
        claimant=claimant,
    )
    if not dispatched:
        return  # a re-dispatch of an overdue continuation: counted at the first
    metrics.GROUPS_FINALISED.labels(continuation=kind).inc()
    if continuation is None:  # no continuation: it completed now
        await group_index.remove(ctx, group_id)
        await group_ended(ctx, group_id)
    # Otherwise the index entry stays at the lease's end: the sweep then finds
    # the group dispatched and looks again at the continuation's deadline.
    logger.info(
        "Group %s finalised: %d done, %d failed, %d lost, continuation %s",
        group_id,
        result.done_count,
        result.failed_count,
        result.lost_count,
        kind,
        extra={
            "fanin_event": "finalised",
            "group_id": group_id,
            "done": result.done_count,
            "failed": result.failed_count,
            "lost": result.lost_count,
            "continuation": kind,
        },
    )


async def _rescore_to_lease_end(ctx: FanInContext, group_id: str) -> None:
    """Have the sweep look again when the finaliser's lease runs out.

    Should this worker die before the dispatch is recorded, the sweep then finds
    the group sooner than at its deadline. Only a hint: its failure stops
    nothing, and it never puts back an entry already removed.
    """
    try:
        await group_index.rescore(ctx, group_id, ms(ctx.config.finaliser_lease))
    except (RedisError, OSError):  # a hint: the sweep finds the group anyway
        logger.warning("Group %s: rescoring its index entry failed", group_id)


async def _kick_continuation(
    ctx: FanInContext,
    ref: ContinuationRef,
    continuation: Signature | None,
    result: GroupResult,
    *,
    attempt: int,
) -> None:
    if continuation is None:
        return
    # The sweep's re-dispatch (attempt > 0) takes no held lease over.
    labels = {**ref.label(), **retry_labels(attempt, sweep_copy=attempt > 0)}
    await (
        continuation.with_labels(**labels)
        .kicker(ctx.prompt_kicker_for(continuation.task_name))
        .with_task_id(ref.task_id)
        .kiq(result, *continuation.args, **continuation.kwargs)
    )
