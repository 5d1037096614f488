"""A chain step's last attempt ended: carry the chain on, finish it, or fail it."""

import asyncio
from typing import Any

from taskiq import TaskiqResult

from taskiq_fanin.chains import (
    chain_index,
    launch,
    saga,
    tasks,
)
from taskiq_fanin.chains.chain_durations import chain_ended
from taskiq_fanin.chains.cursor import ChainCursor
from taskiq_fanin.chains.membership import end_member, member_end
from taskiq_fanin.chains.record import keys_of
from taskiq_fanin.context import FanInContext
from taskiq_fanin.domain.config import ms
from taskiq_fanin.domain.exceptions import (
    MemberNotSerializableError,
    MemberTooLargeError,
)
from taskiq_fanin.domain.signature import Signature
from taskiq_fanin.domain.spec import GroupSpec
from taskiq_fanin.groups.group_validation import GroupPlan
from taskiq_fanin.storage.replies import Advanced, Failed, Finished


async def step_finished(
    ctx: FanInContext, cursor: ChainCursor, result: TaskiqResult[Any], *, delivery: str
) -> None:
    """Record the step's end in the chain's record and do what it calls for.

    A step that failed for good stops its chain (``saga``), unless the chain
    keeps going past failures: then the failure is recorded and the next step
    runs. ``delivery`` names this delivery of the step: retried with the same
    one after an error, a transition whose reply was lost goes on all the same.
    """
    following = cursor.rest[0] if cursor.rest else None
    after = cursor.model_copy(
        update={
            "index": cursor.index + 1,
            "rest": cursor.rest[1:],
            "undo": following.compensation
            if isinstance(following, Signature)
            else None,
        }
    )
    # The step's body did its work: undo it should the chain fail or be cancelled.
    undo = cursor.undo.to_ledger() if cursor.undo and not result.is_err else ""
    plan = None
    if following is not None and not result.is_err:
        result, plan = _unless_unusable(ctx, after, following, result, delivery)
    failure = ""
    if result.is_err:
        failure = tasks.step_error_payload(result.error, ctx.config.max_result_bytes)
        if not cursor.keep_going:
            await _failed(ctx, cursor, result, failure, undo, delivery=delivery)
            return
    if following is None:
        await _finished(ctx, cursor, result, failure, undo, delivery=delivery)
        return
    previous = None if result.is_err else result.return_value
    advanced = await ctx.chain_scripts.advance(
        keys_of(ctx, cursor.id),
        token=cursor.token,
        step=cursor.index,
        compensation=undo,
        ttl_ms=ms(ctx.config.ttl),
        pending=launch.pending_json(after, following, previous),
        failure=failure,
        delivery=delivery,
    )
    if advanced is Advanced.CANCELLED:
        await saga.undo_cancelled_step(ctx, cursor, undo=bool(undo), delivery=delivery)
    elif advanced is Advanced.ADVANCED:
        await launch.kick_step(
            ctx, after, following, previous=previous, delivery=delivery, plan=plan
        )


def _unless_unusable(
    ctx: FanInContext,
    after: ChainCursor,
    following: Signature | GroupSpec,
    result: TaskiqResult[Any],
    delivery: str,
) -> tuple[TaskiqResult[Any], GroupPlan | None]:
    """``result``, or a failure if the next step cannot take it; a group step's plan.

    Found before the chain moves on: a result that is not JSON, or that makes a
    group step's member too large, fails the step that returned it (with the
    error saying why; the step's compensation runs with the others), instead of
    a chain moved on with no step kicked.
    """
    try:
        plan = launch.prepare_step(
            ctx, after, following, result.return_value, delivery=delivery
        )
    except (MemberNotSerializableError, MemberTooLargeError) as unusable:
        failed = {"is_err": True, "return_value": None, "error": unusable}
        return result.model_copy(update=failed), None
    return result, plan


async def _failed(
    ctx: FanInContext,
    cursor: ChainCursor,
    result: TaskiqResult[Any],
    failure: str,
    undo: str,
    *,
    delivery: str,
) -> None:
    # Should this worker die before its member is recorded or the chain is
    # failed, the sweep looks at it once a lease is over, not at its deadline.
    look = chain_index.reschedule(ctx, cursor.id, ms(ctx.config.finaliser_lease))
    fail = ctx.chain_scripts.begin_failing(
        keys_of(ctx, cursor.id),
        token=cursor.token,
        step=cursor.index,
        error=failure,
        delivery=delivery,
        compensation=undo,
    )
    _, (failed, compensations) = await asyncio.gather(look, fail)
    if failed is Failed.CANCELLED:
        await saga.undo_cancelled_step(ctx, cursor, undo=bool(undo), delivery=delivery)
        return
    # The member fails with the error the record keeps (made once).
    end = member_end(ctx, cursor, result, failure=failure)
    if failed is Failed.MISSING:  # expired: no one else will record the member
        await end_member(ctx, end, delivery=delivery)
    elif failed is Failed.FAILING:
        await end_member(ctx, end, delivery=delivery)
        await saga.after_failure(ctx, cursor, failure, compensations)


async def _finished(
    ctx: FanInContext,
    cursor: ChainCursor,
    result: TaskiqResult[Any],
    failure: str,
    undo: str,
    *,
    delivery: str,
) -> None:
    # The member's outcome is made once: the record keeps it, the member gets it.
    end = member_end(ctx, cursor, result, failure=failure)
    finish = ctx.chain_scripts.finish(
        keys_of(ctx, cursor.id),
        token=cursor.token,
        step=cursor.index,
        delivery=delivery,
        failure=failure,
        outcome=end.outcome.value if end is not None else "",
        payload=end.payload if end is not None else "",
        compensation=undo,
    )
    if end is not None:
        # A member is recorded after the chain is done: should this worker die
        # in between, the sweep records it a lease later (the record keeps it).
        look = chain_index.look_sooner(ctx, cursor.id, ms(ctx.config.finaliser_lease))
        _, finished = await asyncio.gather(look, finish)
    else:
        finished = await finish
    if finished is Finished.CANCELLED:
        await saga.undo_cancelled_step(ctx, cursor, undo=bool(undo), delivery=delivery)
    elif finished in (Finished.DONE, Finished.MISSING):
        await end_member(ctx, end, delivery=delivery)
    if finished is Finished.DONE:
        await chain_ended(ctx, cursor.id)
        if end is None:
            # Over, and no group's member: the sweep would only prune its
            # entry, so it leaves the index now (a member's chain stays, for
            # the sweep to record the member should this worker die first).
            await chain_index.remove(ctx, cursor.id)
