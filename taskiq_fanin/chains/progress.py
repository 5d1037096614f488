"""A chain step's last attempt ended: carry the chain on, finish it, or fail it."""

from typing import Any

from taskiq import TaskiqResult

from taskiq_fanin.chains import launch, saga
from taskiq_fanin.chains.cursor import ChainCursor
from taskiq_fanin.chains.membership import end_member
from taskiq_fanin.chains.record import keys_of
from taskiq_fanin.context import FanInContext
from taskiq_fanin.groups import index
from taskiq_fanin.groups.recording import error_payload
from taskiq_fanin.model.config import ms
from taskiq_fanin.model.signature import Signature
from taskiq_fanin.store.replies import Advanced


async def step_finished(
    ctx: FanInContext, cursor: ChainCursor, result: TaskiqResult[Any], *, delivery: str
) -> None:
    """Record the step's end in the chain's record and do what it calls for.

    A step that failed for good stops its chain (``saga``), unless the chain
    keeps going past failures: then the failure is recorded and the next step
    runs. ``delivery`` names this delivery of the step: retried with the same
    one after an error, a transition whose reply was lost goes on all the same.
    """
    keys = keys_of(ctx, cursor.id)
    scripts = ctx.chain_scripts
    failure = ""
    if result.is_err:
        failure = error_payload(result.error, ctx.config.max_result_bytes)
        if not cursor.keep_going:
            compensations = await scripts.fail(
                keys,
                token=cursor.token,
                step=cursor.index,
                error=failure,
                delivery=delivery,
            )
            await end_member(ctx, cursor, result, delivery=delivery)
            if compensations is not None:
                # Should this worker die before the chain is failed, the sweep
                # looks at it once a lease is over, not at its deadline.
                await index.reschedule(
                    ctx, cursor.id, ms(ctx.config.lease), chains=True
                )
                await saga.after_failure(ctx, cursor, failure, compensations)
            return
    if not cursor.rest:
        await end_member(ctx, cursor, result, delivery=delivery)
        await scripts.finish(
            keys, token=cursor.token, step=cursor.index, failure=failure
        )
        return
    following = cursor.rest[0]
    after = cursor.model_copy(
        update={
            "index": cursor.index + 1,
            "rest": cursor.rest[1:],
            "undo": following.compensation
            if isinstance(following, Signature)
            else None,
        }
    )
    previous = None if result.is_err else result.return_value
    advanced = await scripts.advance(
        keys,
        token=cursor.token,
        step=cursor.index,
        compensation=cursor.undo.to_ledger() if cursor.undo and not failure else "",
        ttl_ms=ms(ctx.config.ttl),
        pending=launch.pending_json(after, following, previous),
        failure=failure,
        delivery=delivery,
    )
    if advanced is Advanced.CANCELLED:
        await saga.undo_cancelled_step(ctx, cursor, delivery=delivery)
    elif advanced is Advanced.ADVANCED:
        await launch.kick_step(
            ctx, after, following, previous=previous, delivery=delivery
        )
