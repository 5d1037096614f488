"""A chain's error continuation (``on_error``): kicked, guarded, run once.

A chain that fails kicks its ``on_error`` before its compensations; should its
worker die in between, the sweep kicks it again (the chain is still
``failing``), and both copies reach a worker. So ``on_error`` has a run guard
of its own in the chain's record, as a continuation and a step have (invariant
15): one copy runs at a time under a renewed lease, a failed attempt releases
it for its retry, and once one copy ran to its end no other runs. On a broker
that never redelivers, a copy refused while another runs is gone, and so is the
running one should its worker die: the sweep watches a failed chain until its
``on_error`` ran to its end (``sweep/on_error_watch.py``), and kicks it again.
"""

from collections.abc import Sequence

from taskiq_fanin.chains import record
from taskiq_fanin.chains.cursor import ChainCursor, PendingStep
from taskiq_fanin.context import FanInContext
from taskiq_fanin.domain.config import ms
from taskiq_fanin.domain.ids import chain_on_error_id
from taskiq_fanin.domain.labels import OnErrorRef, retry_labels
from taskiq_fanin.domain.results import (
    ChainFailure,
    ChainState,
    MemberError,
    OnErrorState,
    StepError,
)
from taskiq_fanin.storage.records import ChainRecord
from taskiq_fanin.storage.replies import Begin

#: ``on_error_state`` once a copy of it ran to its end (``states.ON_ERROR_MOVES``).
COMPLETED = OnErrorState.COMPLETED.value
#: ... and while a copy runs (or ran, if its worker died), under a lease.
RUNNING = OnErrorState.RUNNING.value


async def kick(
    ctx: FanInContext,
    cursor: ChainCursor,
    failure: ChainFailure,
    *,
    attempt: int = 0,
    sweep_copy: bool = False,
) -> None:
    """Enqueue the chain's ``on_error`` with its failure (its id the same each time).

    ``attempt``: the retry middlewares' count it goes as (``_retries``);
    ``sweep_copy``: the sweep's, which takes no held lease over.
    """
    if cursor.on_error is None:
        return
    ref = OnErrorRef(chain_id=cursor.id, token=cursor.token)
    labels = {**ref.label(), **retry_labels(attempt, sweep_copy=sweep_copy)}
    await (
        cursor.on_error.with_labels(**labels)
        .kicker(ctx.kicker_for(cursor.on_error.task_name))
        .with_task_id(chain_on_error_id(cursor.id))
        .kiq(failure, *cursor.on_error.args, **cursor.on_error.kwargs)
    )


def failure_of(cursor: ChainCursor, names: Sequence[str], error: str) -> ChainFailure:
    """What ``on_error`` receives: the failed step (the cursor's) and its error.

    ``error``: the step's error as the record keeps it (a ``StepError``).
    """
    name = names[cursor.index] if cursor.index < len(names) else ""
    return ChainFailure.of_step(
        cursor.id, cursor.index, name, StepError.model_validate_json(error)
    )


def outstanding(chain: ChainRecord) -> ChainCursor | None:
    """The failed step's cursor while the chain's ``on_error`` is to run to its end.

    ``None`` unless the chain failed, has an ``on_error``, and no copy of it
    completed (it was kicked, or a copy began).
    """
    if chain.state is not ChainState.FAILED or chain.on_error_state == COMPLETED:
        return None
    if not chain.pending:
        return None
    cursor = PendingStep.model_validate_json(chain.pending).cursor
    return cursor if cursor.on_error is not None else None


async def kick_again(
    ctx: FanInContext, cursor: ChainCursor, chain: ChainRecord, *, attempt: int
) -> None:
    """Kick a failed chain's ``on_error`` again, as its failure kicked it (the sweep).

    Its run guard lets this copy run only if no other copy holds the lease and
    none ran to its end. ``attempt``: as which it goes (``checkOnError``: the
    one after the recorded attempt, so that no late copy of a lost one, nor the
    retry it kicked, takes the lease over from this one).
    """
    unknown = MemberError(type="UnknownError", message="").model_dump_json()
    failure = failure_of(cursor, chain.step_names, chain.error_entry or unknown)
    await kick(ctx, cursor, failure, attempt=attempt, sweep_copy=True)


async def begin(
    ctx: FanInContext,
    ref: OnErrorRef,
    *,
    attempt: int,
    delivery: str,
    takes_over: bool = True,
) -> Begin:
    """Whether this delivery of ``on_error`` may run its body (``RUN``).

    ``attempt`` counts the retry middleware's attempts: the next one takes over
    (an earlier one never runs: ``may_take_lease`` in the Lua prelude), unless
    it is the sweep's copy (``takes_over``).
    The lease lasts ``finaliser_lease``; the same delivery asking again renews it.
    """
    return await ctx.chain_scripts.begin_on_error(
        record.keys_of(ctx, ref.chain_id),
        token=ref.token,
        attempt=attempt,
        delivery=delivery,
        lease_ms=ms(ctx.config.finaliser_lease),
        takes_over=takes_over,
    )


async def release(
    ctx: FanInContext, ref: OnErrorRef, *, attempt: int, delivery: str
) -> None:
    """An attempt ended with a retry to come: let the retry run.

    ``delivery``: the one the guard began it as; only its lease is released.
    The retry is due to begin within the chain's step span: past it, the sweep
    counts it lost (``sweep/on_error_watch.py``).
    """
    await ctx.chain_scripts.release_on_error(
        record.keys_of(ctx, ref.chain_id),
        token=ref.token,
        attempt=attempt,
        delivery=delivery,
        deadline_ms=ms(ctx.config.deadline),
    )


async def complete(ctx: FanInContext, ref: OnErrorRef) -> None:
    """``on_error`` ran to its end (its last attempt): no copy of it runs again."""
    await ctx.chain_scripts.complete_on_error(
        record.keys_of(ctx, ref.chain_id), token=ref.token
    )
