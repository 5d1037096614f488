"""A chain step's last attempt ended: carry the chain on, finish it, or fail it."""

from typing import Any

from taskiq import TaskiqResult

from taskiq_fanin.chains import launch, saga
from taskiq_fanin.chains.cursor import ChainCursor
from taskiq_fanin.chains.membership import end_member
from taskiq_fanin.chains.record import keys_of
from taskiq_fanin.context import FanInContext
from taskiq_fanin.groups.recording import error_payload
from taskiq_fanin.model.config import ms
from taskiq_fanin.model.signature import Signature
from taskiq_fanin.store.replies import Advanced


async def step_finished(
    ctx: FanInContext, cursor: ChainCursor, result: TaskiqResult[Any]
) -> None:
    """Record the step's end in the chain's record and do what it calls for."""
    keys = keys_of(ctx, cursor.id)
    scripts = ctx.chain_scripts
    if result.is_err:
        summary = error_payload(result.error, ctx.config.max_result_bytes)
        compensations = await scripts.fail(
            keys,
            token=cursor.token,
            step=cursor.index,
            now_ms=ctx.now_ms(),
            error=summary,
        )
        await end_member(ctx, cursor, result)  # idempotent: before the record
        if compensations is not None:
            await saga.after_failure(ctx, cursor, summary, compensations)
        return
    if not cursor.rest:
        await end_member(ctx, cursor, result)  # idempotent: before the record
        await scripts.finish(
            keys, token=cursor.token, step=cursor.index, now_ms=ctx.now_ms()
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
    advanced = await scripts.advance(
        keys,
        token=cursor.token,
        step=cursor.index,
        now_ms=ctx.now_ms(),
        compensation=cursor.undo.to_ledger() if cursor.undo else "",
        ttl_ms=ms(ctx.config.ttl),
        pending=launch.pending_json(after, following, result.return_value),
    )
    if advanced is Advanced.CANCELLED:
        await saga.undo_cancelled_step(ctx, cursor)
    elif advanced is Advanced.ADVANCED:
        await launch.kick_step(ctx, after, following, previous=result.return_value)
