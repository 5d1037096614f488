"""The sweep's look at one chain: is its step moving, or its failure finished?

A chain stops if a worker dies between its record moving on and the next step's
kick, or between its failure being recorded and its error continuation and
compensations being kicked; a chain that is a group member may have ended
without its member recorded, and a cancel may have stopped half-way. Each chain
is judged from its own record, by the step span recorded with it and on Redis's
clock.
"""

from taskiq_fanin.chains import index, launch, record, saga
from taskiq_fanin.chains.cursor import PendingStep
from taskiq_fanin.chains.membership import settle_member
from taskiq_fanin.context import FanInContext, new_delivery
from taskiq_fanin.model.config import ms
from taskiq_fanin.model.errors import ChainGivenUpError
from taskiq_fanin.model.results import ChainState, GroupState, SweepPolicy
from taskiq_fanin.model.spec import GroupSpec
from taskiq_fanin.store.keys import GroupKeys
from taskiq_fanin.store.records import ChainRecord
from taskiq_fanin.sweep import known
from taskiq_fanin.sweep.report import Finding, FindingKind, SweepAction


async def judge_chain(
    ctx: FanInContext, chain_id: str, *, policy: SweepPolicy, dry_run: bool
) -> Finding | None:
    """Judge one indexed chain and, unless ``dry_run``, act; ``None``: nothing due.

    A chain left ``failing`` is finished (its error continuation and
    compensations kicked). A running chain stuck at a step is reported; by
    ``policy`` its step is kicked again as it was recorded (``redrive``, at most
    ``max_redrives`` times, never a task the broker does not know), or the
    chain is failed with a ``ChainGivenUpError`` (``give_up``).
    """
    keys = record.keys_of(ctx, chain_id)
    found = await ctx.chain_scripts.inspect(keys)
    state = found[0].state if found else ChainState.MISSING
    if found is None or state not in (ChainState.RUNNING, ChainState.FAILING):
        if not dry_run:  # over, or expired: nothing left to watch
            if found is not None:
                await _settle(ctx, chain_id, found[0])
            await index.remove(ctx, chain_id)
        return None
    chain, now = found
    span = (
        _deadline_ms(ctx, chain)
        if state is ChainState.RUNNING
        else ms(ctx.config.lease)
    )
    updated_at = chain.updated_at or 0
    due_at = updated_at + span
    # Waiting on a group step that is on time: the chain is on time too.
    due_at = await _group_step_due(ctx, chain_id, chain, now, due_at, dry_run=dry_run)
    if due_at > now:
        if not dry_run:
            await index.reschedule(ctx, chain_id, due_at - now)
        return None
    step = chain.step  # from 0, as the record keeps it
    names = chain.step_names
    name = names[step] if step < len(names) else "end"
    finding = Finding(
        group_id=chain_id,
        kind=FindingKind.CHAIN_STUCK,
        action=_ACTIONS.get(policy, SweepAction.REPORT),
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
    elif known.tasks_checked(ctx) and chain.pending:
        kick = PendingStep.model_validate_json(chain.pending)
        finding.unknown_tasks = known.unknown_in_step(ctx, kick.step)
        if finding.unknown_tasks:
            left = "not re-driven: " if finding.action is SweepAction.REDRIVE else ""
            finding.note += f"; {left}{known.unknown_note(finding.unknown_tasks)}"
    if dry_run:
        return finding
    stuck_ms = now - updated_at
    await _act(ctx, chain_id, finding, chain, step_name=name, stuck_ms=stuck_ms)
    return finding


#: What the sweep does about a stuck chain, by the policy it sweeps with.
_ACTIONS = {
    SweepPolicy.REDRIVE: SweepAction.REDRIVE,
    SweepPolicy.GIVE_UP: SweepAction.GIVE_UP,
}


async def _group_step_due(
    ctx: FanInContext,
    chain_id: str,
    chain: ChainRecord,
    now: int,
    due_at: int,
    *,
    dry_run: bool,
) -> int:
    """When a chain due at ``due_at`` stops being on time, its group step seen to.

    A windowed group runs for as long as its width takes, its deadline sliding
    while its window moves (``recordOutcome``): a chain waiting on it is not
    stuck while it is not, and its record is kept as long as the group's keys
    (``keepChain``), or it would expire under the step. A group that is stuck
    is the group sweep's to handle, by its own policy.
    """
    if chain.state is not ChainState.RUNNING or due_at > now or not chain.pending:
        return due_at
    kick = PendingStep.model_validate_json(chain.pending)
    if not isinstance(kick.step, GroupSpec) or kick.cursor.index != chain.step:
        return due_at
    inspected = await ctx.scripts.inspect_group(
        GroupKeys(ctx.config.prefix, kick.cursor.step_id)
    )
    if inspected is None or inspected.meta.state is not GroupState.OPEN:
        return due_at
    meta = inspected.meta
    if (meta.due_at or 0) <= now:
        return due_at
    if not dry_run and meta.expires_at:
        await ctx.chain_scripts.keep(
            record.keys_of(ctx, chain_id),
            token=chain.token,
            step=chain.step,
            until_ms=meta.expires_at,
        )
    return meta.due_at or due_at


def _deadline_ms(ctx: FanInContext, chain: ChainRecord) -> int:
    """How long the chain's step may take: as started (the config's, if unsaid)."""
    if chain.deadline_ms is None:
        return ms(ctx.config.deadline)
    return chain.deadline_ms


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
            await launch.repeat(ctx, pending)
            finding.applied = True
            look_again = _deadline_ms(ctx, chain)
        else:
            finding.note += f"; not re-driven ({redrives} re-drives used)"
    elif finding.action is SweepAction.REPORT:
        finding.applied = True
    await index.reschedule(ctx, chain_id, look_again)


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
