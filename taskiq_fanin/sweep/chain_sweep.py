"""The sweep's look at one chain: is its step moving, or its failure finished?

A chain stops if a worker dies between its record moving on and the next step's
kick, or between its failure being recorded and its error continuation and
compensations being kicked; a chain that is a group member may have ended
without its member recorded, and a cancel may have stopped half-way. Each chain
is judged from its own record, by the step span recorded with it and on Redis's
clock.
"""

from taskiq_fanin.chains import (
    chain_index,
    due,
    error_continuation,
    launch,
    record,
    saga,
)
from taskiq_fanin.chains.cursor import PendingStep
from taskiq_fanin.chains.membership import settle_member
from taskiq_fanin.context import FanInContext, new_delivery
from taskiq_fanin.domain.config import ms
from taskiq_fanin.domain.exceptions import ChainGivenUpError
from taskiq_fanin.domain.results import ChainState, SweepPolicy
from taskiq_fanin.domain.signature import Signature
from taskiq_fanin.storage.keys import ChainKeys
from taskiq_fanin.storage.records import ChainRecord
from taskiq_fanin.sweep import known
from taskiq_fanin.sweep.on_error_watch import judge_on_error
from taskiq_fanin.sweep.report import Finding, FindingKind, SweepAction


async def judge_chain(
    ctx: FanInContext, chain_id: str, *, sweep_policy: SweepPolicy, dry_run: bool
) -> Finding | None:
    """Judge one indexed chain and, unless ``dry_run``, act; ``None``: nothing due.

    A chain left ``failing`` is finished (its error continuation and
    compensations kicked); a failed one's error continuation watched until it
    ran to its end. A running chain stuck at a step is reported; by
    ``sweep_policy`` its step is kicked again as it was recorded (``redrive``, at most
    ``max_redrives`` times, never a task the broker does not know), or the
    chain is failed with a ``ChainGivenUpError`` (``give_up``).
    """
    keys = record.keys_of(ctx, chain_id)
    found = await ctx.chain_scripts.inspect(keys)
    if found is None:
        if not dry_run:  # expired: nothing left to watch
            await chain_index.remove(ctx, chain_id)
        return None
    chain, now = found
    state = chain.state
    if state not in (ChainState.RUNNING, ChainState.FAILING):
        return await _over(
            ctx, chain_id, chain, now, sweep_policy=sweep_policy, dry_run=dry_run
        )
    updated_at = chain.updated_at or 0
    due_at = await _due_at(ctx, keys, chain, now, dry_run=dry_run)
    if due_at > now:
        if not dry_run:
            await chain_index.reschedule(ctx, chain_id, due_at - now)
        return None
    step = chain.step  # from 0, as the record keeps it
    names = chain.step_names
    name = names[step] if step < len(names) else "end"
    finding = Finding(
        group_id=chain_id,
        kind=FindingKind.CHAIN_STUCK,
        action=_ACTIONS.get(sweep_policy, SweepAction.REPORT),
        applied=False,
        state=state.value,
        total=chain.steps,
        done=step,
        overdue_seconds=(now - due_at) / 1000,
        age_seconds=(now - (chain.started_at or now)) / 1000,
        redrives=chain.redrives,
        note=f"at step {step + 1} of {chain.steps} ({name})",
    )
    if state is ChainState.FAILING:
        finding.kind, finding.action = FindingKind.CHAIN_FAILING, SweepAction.FINISH
    elif chain.pending:
        _look_at_step(ctx, finding, chain, name)
    if dry_run:
        return finding
    stuck_ms = now - updated_at
    await _act(ctx, chain_id, finding, chain, step_name=name, stuck_ms=stuck_ms)
    return finding


def _look_at_step(
    ctx: FanInContext, finding: Finding, chain: ChainRecord, name: str
) -> None:
    """What the stuck step is: whether it ever began, and tasks none here knows."""
    kick = PendingStep.model_validate_json(chain.pending)
    _started(finding, chain, kick, name)
    if known.tasks_checked(ctx):
        finding.unknown_tasks = known.unknown_in_step(ctx, kick.step)
    if finding.unknown_tasks:
        left = "not re-driven: " if finding.action is SweepAction.REDRIVE else ""
        finding.note += f"; {left}{known.unknown_note(finding.unknown_tasks)}"


def _started(
    finding: Finding, chain: ChainRecord, kick: PendingStep, name: str
) -> None:
    """Whether the stuck task step ever began: lost in flight, or never run.

    A worker that does not know a message's task drops it without running any
    middleware: such a step never starts, however often it is kicked.
    """
    if not isinstance(kick.step, Signature):
        return  # a group step: its own group is judged
    finding.started = chain.run_step == chain.step
    if finding.started:
        finding.note += "; a copy of it began and never finished"
    else:
        finding.note += (
            f"; never started: no worker ran {name} (a worker that does not "
            "know a task drops its messages unrun: is it deployed?)"
        )


async def _due_at(
    ctx: FanInContext, keys: ChainKeys, chain: ChainRecord, now: int, *, dry_run: bool
) -> int:
    """When the chain is stuck: a failing one a lease after it moved.

    A running one by :func:`due.step_due`, as ``list_chains`` judges it:
    waiting on a group step that is on time, it is on time too, and (unless
    ``dry_run``) its record is kept as long as the group's keys (``keepChain``),
    or it would expire under the step.
    """
    if chain.state is not ChainState.RUNNING:
        return (chain.updated_at or 0) + ms(ctx.config.finaliser_lease)
    found = await due.step_due(ctx, chain, now)
    if found.group_expires_at and not dry_run:
        await ctx.chain_scripts.keep(
            keys,
            token=chain.token,
            step=chain.step,
            until_ms=found.group_expires_at,
        )
    return found.at


#: What the sweep does about a stuck chain, by the policy it sweeps with.
_ACTIONS = {
    SweepPolicy.REDRIVE: SweepAction.REDRIVE,
    SweepPolicy.GIVE_UP: SweepAction.GIVE_UP,
}


async def _over(
    ctx: FanInContext,
    chain_id: str,
    chain: ChainRecord,
    now: int,
    *,
    sweep_policy: SweepPolicy,
    dry_run: bool,
) -> Finding | None:
    """A chain that ended: settled, then left, unless its ``on_error`` is to run.

    A failed chain is watched until its ``on_error`` ran to its end
    (``sweep/error_continuation.py``).
    """
    cursor = error_continuation.outstanding(chain)
    if not dry_run and not chain.settled:
        await _settle(ctx, chain_id, chain)
        if cursor is not None:  # watched on: settled once, not at every visit
            keys = record.keys_of(ctx, chain_id)
            await ctx.chain_scripts.mark_settled(keys, token=chain.token)
    if cursor is not None:
        return await judge_on_error(
            ctx,
            chain_id,
            cursor,
            chain,
            now,
            sweep_policy=sweep_policy,
            dry_run=dry_run,
        )
    if not dry_run:  # nothing left to watch
        await chain_index.remove(ctx, chain_id)
    return None


async def _settle(ctx: FanInContext, chain_id: str, chain: ChainRecord) -> None:
    """Before a chain over leaves the index: what its end may have left undone.

    The worker (or caller) that ended it may have died before recording the
    group member it is, or before carrying out all of a cancel; doing it again
    does it once.
    """
    if chain.state is ChainState.CANCELLED:
        await saga.finish_cancelled(ctx, chain_id)
    else:
        await settle_member(ctx, chain, delivery=new_delivery())


async def _act(
    ctx: FanInContext,
    chain_id: str,
    finding: Finding,
    chain: ChainRecord,
    *,
    step_name: str,
    stuck_ms: int,
) -> None:
    look_again = 0  # seen in turn with the others at the next sweep
    if finding.action is SweepAction.FINISH:
        await saga.finish_failing(ctx, chain_id, chain.pending)
        finding.applied = True
        return
    if finding.action is SweepAction.GIVE_UP:
        error = _given_up(finding, step_name, stuck_ms)
        if await saga.give_up(ctx, chain.pending, error):
            finding.applied = True
            return
        finding.note += "; not given up: it moved on meanwhile"
    elif finding.action is SweepAction.REDRIVE and not finding.unknown_tasks:
        redrives, pending = await ctx.chain_scripts.redrive(
            record.keys_of(ctx, chain_id),
            token=chain.token,
            max_redrives=ctx.config.max_redrives,
            ttl_ms=ms(ctx.config.ttl),
        )
        finding.redrives = redrives
        if pending:
            # A copy of the step began and was lost: the attempt after it.
            began = chain.run_step == chain.step
            attempt = chain.run_attempt + 1 if began else 0
            await launch.repeat(ctx, pending, attempt=attempt)
            finding.applied = True
            look_again = due.deadline_ms(ctx, chain)
        else:
            finding.note += f"; not re-driven ({redrives} re-drives used)"
    elif finding.action is SweepAction.REPORT:
        finding.applied = True
    await chain_index.reschedule(ctx, chain_id, look_again)


def _given_up(finding: Finding, step_name: str, stuck_ms: int) -> ChainGivenUpError:
    """The error a chain given up on fails with, naming its step (from 1)."""
    reason = f"; {known.unknown_note(finding.unknown_tasks)}"
    return ChainGivenUpError(
        step=finding.done + 1,
        steps=finding.total,
        task_name=step_name,
        stuck_seconds=stuck_ms / 1000,
        reason=reason if finding.unknown_tasks else "",
    )
