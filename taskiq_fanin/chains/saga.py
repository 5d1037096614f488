"""When a chain stops early: its error continuation, its compensations, cancelling.

A step that fails for good stops its chain: the record says ``failing``,
``on_error`` is kicked with a ``ChainFailure``, the compensations of the steps
already completed are started, last first, as a chain of their own
(``<chain id>~undo``) that goes on past a compensation that fails for good
(each is attempted once; the failures are recorded in its status); then the
record says ``failed``. A crash in between leaves it ``failing``, and the sweep
does the rest (``finish_failing``). A chain the sweep gives up on (stuck at a
step) fails the same way (``give_up``). A cancelled chain runs no further step, and
its compensations run as for a failure.
"""

from taskiq import TaskiqResult

from taskiq_fanin.chains import (
    chain_index,
    error_continuation,
    launch,
    record,
    tasks,
)
from taskiq_fanin.chains.chain_durations import chain_ended
from taskiq_fanin.chains.cursor import ChainCursor, PendingStep
from taskiq_fanin.chains.membership import (
    cancelled_result,
    end_member,
    member_end,
    settle_member,
)
from taskiq_fanin.context import FanInContext, new_delivery
from taskiq_fanin.domain.config import ms
from taskiq_fanin.domain.exceptions import FanInError
from taskiq_fanin.domain.ids import (
    step_id,
    step_undo_id,
    undo_chain_id,
    validate_chain_id,
)
from taskiq_fanin.domain.results import ChainState, MemberError
from taskiq_fanin.domain.signature import Signature
from taskiq_fanin.domain.spec import ChainSpec, GroupSpec
from taskiq_fanin.groups.continuation import cancel_group, complete_unrun
from taskiq_fanin.storage.records import ChainRecord
from taskiq_fanin.storage.replies import Cancelled, Failed


async def after_failure(
    ctx: FanInContext, cursor: ChainCursor, summary: str, compensations: list[str]
) -> None:
    """The chain is failing at the cursor's step: kick ``on_error``, undo, end it."""
    if cursor.on_error is not None:
        names = (await record.status(ctx, cursor.id)).step_names
        await error_continuation.kick(
            ctx, cursor, error_continuation.failure_of(cursor, names, summary)
        )
    await compensate(ctx, undo_chain_id(cursor.id), compensations)
    if await ctx.chain_scripts.end_failing(
        record.keys_of(ctx, cursor.id), token=cursor.token
    ):
        await chain_ended(ctx, cursor.id)


async def finish_failing(ctx: FanInContext, chain_id: str, pending: str) -> None:
    """Finish a chain a crash left ``failing`` (the sweep): the same kicks again.

    ``on_error`` may have been kicked already (its worker died after the kick):
    its run guard runs one copy to its end (``error_continuation.py``); the undo chain
    has its own id, started once.
    """
    keys = record.keys_of(ctx, chain_id)
    found = await ctx.chain_scripts.read(keys)
    if found.state is not ChainState.FAILING:
        return
    cursor = PendingStep.model_validate_json(pending).cursor
    compensations = await ctx.chain_scripts.compensations(keys)
    unknown = MemberError(type="UnknownError", message="").model_dump_json()
    await after_failure(ctx, cursor, found.error_entry or unknown, compensations)


async def give_up(ctx: FanInContext, pending: str, error: FanInError) -> bool:
    """Fail a chain at the step it is stuck at (the sweep gives up on it), once.

    The way a step that fails for good goes, with ``error`` as the step's:
    ``failing``, the group member it is recorded failed, ``on_error`` kicked
    with a ``ChainFailure``, the compensations started, then ``failed``; a group
    step is cancelled, nothing waits on it now. The record's token and step
    checks make it once: False when the chain moved on meanwhile (a slow step
    that ended), was cancelled, or is gone. A step still running ends as after
    a cancel: it moves nothing, and its compensation runs.
    """
    kick = PendingStep.model_validate_json(pending)
    cursor = kick.cursor
    failure = tasks.step_error_payload(error, ctx.config.max_result_bytes)
    delivery = new_delivery()
    # Should the sweep die half-way, the next one finishes it a lease later.
    await chain_index.reschedule(ctx, cursor.id, ms(ctx.config.finaliser_lease))
    failed, compensations = await ctx.chain_scripts.begin_failing(
        record.keys_of(ctx, cursor.id),
        token=cursor.token,
        step=cursor.index,
        error=failure,
        delivery=delivery,
        given_up=True,
    )
    if failed is not Failed.FAILING:
        return False
    if isinstance(kick.step, GroupSpec):
        await cancel_group(ctx, cursor.step_id)
    result: TaskiqResult[None] = TaskiqResult(
        is_err=True, return_value=None, execution_time=0.0, error=error
    )
    end = member_end(ctx, cursor, result, failure=failure)
    await end_member(ctx, end, delivery=delivery)
    await after_failure(ctx, cursor, failure, compensations)
    return True


async def compensate(ctx: FanInContext, undo_id: str, compensations: list[str]) -> None:
    """Run the compensations, last completed step first, as a chain of their own.

    It goes on past a compensation that fails for good: each is attempted once.
    Each was checked with its step when the chain started.
    """
    if not compensations:
        return
    steps = [Signature.from_ledger(raw).immutable() for raw in reversed(compensations)]
    spec = ChainSpec(steps=tuple(steps), keep_going=True)
    await launch.start(ctx, spec, chain_id=undo_id, checked=True)


async def undo_cancelled_step(
    ctx: FanInContext, cursor: ChainCursor, *, undo: bool, delivery: str
) -> None:
    """The chain was cancelled (or given up) while this step ran: undo it too.

    ``undo``: the step's body did its work (a failed one left nothing to undo).
    The record keeps that compensation, so that the sweep starts it should this
    worker die first (the same id: started once).
    """
    if undo and cursor.undo is not None:
        await compensate(
            ctx, step_undo_id(cursor.id, cursor.index), [cursor.undo.to_ledger()]
        )
    end = member_end(ctx, cursor, cancelled_result())
    await end_member(ctx, end, delivery=delivery)


async def cancel(ctx: FanInContext, chain_id: str) -> bool:
    """Cancel a running chain: its completed steps' compensations run.

    False if the chain is not running (over, or unknown). Safe to call again: a
    call that failed half-way (Redis away) is finished by the next one, or by
    the sweep.
    """
    validate_chain_id(chain_id, derived=True)
    cancelled = await ctx.chain_scripts.cancel(record.keys_of(ctx, chain_id))
    if cancelled is None:
        return False
    await _carry_out(ctx, chain_id, cancelled)
    return cancelled.now


async def finish_cancelled(ctx: FanInContext, chain_id: str) -> None:
    """Carry out a cancel again (the sweep): its caller may have died half-way."""
    cancelled = await ctx.chain_scripts.cancel(record.keys_of(ctx, chain_id))
    if cancelled is not None:
        await _carry_out(ctx, chain_id, cancelled)


async def _carry_out(ctx: FanInContext, chain_id: str, cancelled: Cancelled) -> None:
    """What a cancel does besides the record's move; each part once, however often.

    If the chain is at a group step, that group continues nothing now; the
    compensations start as ``<chain id>~undo`` (started once); the group member
    the chain is counts as cancelled (recorded once). A step running meanwhile
    undoes itself when it ends.
    """
    await cancel_group(ctx, step_id(chain_id, cancelled.step))
    await compensate(ctx, undo_chain_id(chain_id), cancelled.compensations)
    if cancelled.step_undo:
        undo_id = step_undo_id(chain_id, cancelled.step)
        await compensate(ctx, undo_id, [cancelled.step_undo])
    over = ChainRecord(state=ChainState.CANCELLED, member=cancelled.member)
    await settle_member(ctx, over, delivery=new_delivery())
    if cancelled.now:
        await chain_ended(ctx, chain_id)


async def skipped(
    ctx: FanInContext, cursor: ChainCursor, *, continuation: bool, delivery: str
) -> None:
    """Close what a step the guard skipped may leave open, if its chain is over.

    A cancelled chain leaves the group whose continuation the step was, and may
    have a cancel to finish (its caller, or a step's worker, died half-way). Any
    chain over may not have recorded the group member it is, if the worker that
    ended it died first. Each is done once, however often asked.
    """
    found = await ctx.chain_scripts.read(record.keys_of(ctx, cursor.id))
    if found.state in (ChainState.MISSING, ChainState.RUNNING):
        return
    if found.state is ChainState.CANCELLED:
        if continuation:
            await complete_unrun(ctx, cursor.step_id)
        await finish_cancelled(ctx, cursor.id)
    else:
        await settle_member(ctx, found, delivery=delivery)
