"""A chain's error continuation (``on_error``): kicked, guarded, run once.

A chain that fails kicks its ``on_error`` before its compensations; should its
worker die in between, the sweep kicks it again (the chain is still
``failing``), and both copies reach a worker. So ``on_error`` has a run guard
of its own in the chain's record, as a continuation and a step have (invariant
15): one copy runs at a time under a renewed lease, a failed attempt releases
it for its retry, and once one copy ran to its end no other runs.
"""

from taskiq_fanin.chains import record
from taskiq_fanin.chains.cursor import ChainCursor
from taskiq_fanin.context import FanInContext
from taskiq_fanin.model.config import ms
from taskiq_fanin.model.ids import chain_on_error_id
from taskiq_fanin.model.labels import OnErrorRef
from taskiq_fanin.model.results import ChainFailure
from taskiq_fanin.store.replies import Begin


async def kick(ctx: FanInContext, cursor: ChainCursor, failure: ChainFailure) -> None:
    """Enqueue the chain's ``on_error`` with its failure (its id the same each time)."""
    if cursor.on_error is None:
        return
    ref = OnErrorRef(chain_id=cursor.id, token=cursor.token)
    await (
        cursor.on_error.with_labels(**ref.label())
        .kicker(ctx.kicker)
        .with_task_id(chain_on_error_id(cursor.id))
        .kiq(failure, *cursor.on_error.args, **cursor.on_error.kwargs)
    )


async def begin(
    ctx: FanInContext, ref: OnErrorRef, *, attempt: int, delivery: str
) -> Begin:
    """Whether this delivery of ``on_error`` may run its body (``RUN``).

    ``attempt`` counts the retry middleware's attempts: a later one takes over.
    The lease lasts ``finaliser_lease``; the same delivery asking again renews it.
    """
    return await ctx.chain_scripts.begin_on_error(
        record.keys_of(ctx, ref.chain_id),
        token=ref.token,
        attempt=attempt,
        delivery=delivery,
        lease_ms=ms(ctx.config.lease),
    )


async def release(ctx: FanInContext, ref: OnErrorRef, *, attempt: int) -> None:
    """An attempt ended with a retry to come: let the retry run."""
    await ctx.chain_scripts.release_on_error(
        record.keys_of(ctx, ref.chain_id), token=ref.token, attempt=attempt
    )


async def complete(ctx: FanInContext, ref: OnErrorRef) -> None:
    """``on_error`` ran to its end (its last attempt): no copy of it runs again."""
    await ctx.chain_scripts.complete_on_error(
        record.keys_of(ctx, ref.chain_id), token=ref.token
    )
