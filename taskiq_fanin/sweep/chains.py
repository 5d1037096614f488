"""The sweep's look at chains: report those whose step has not moved in time.

A chain stops if a worker dies between its record moving on and the next
step's kick; reported, it does not stay silent.
"""

from taskiq_fanin.chains import launch, record
from taskiq_fanin.context import FanInContext
from taskiq_fanin.model.config import ms
from taskiq_fanin.model.results import ChainState, SweepPolicy
from taskiq_fanin.store.keys import chain_index_key
from taskiq_fanin.store.scripts import text
from taskiq_fanin.sweep.report import Finding, FindingKind, SweepAction


async def sweep_chains(
    ctx: FanInContext,
    *,
    now: int,
    override: SweepPolicy | None,
    dry_run: bool,
    batch: int,
) -> tuple[int, list[Finding]]:
    """Examine up to ``batch`` due chains: how many, and the stuck ones found.

    With the ``redrive`` policy (the caller's, else the middleware's default) a
    stuck chain's current step is kicked again as it was recorded, at most
    ``max_redrives`` times; any other policy reports it.
    """
    redrive = (override or ctx.config.sweep_policy) is SweepPolicy.REDRIVE
    index = chain_index_key(ctx.config.prefix)
    due = await ctx.redis.zrangebyscore(index, "-inf", now, start=0, num=batch)
    deadline_ms = ms(ctx.config.deadline)
    findings: list[Finding] = []
    for raw in due:
        chain_id = text(raw)
        status = await record.status(ctx, chain_id)
        if status.state is not ChainState.RUNNING:
            if not dry_run:  # over, or expired: nothing left to watch
                await ctx.redis.zrem(index, chain_id)
            continue
        moved_ms = int(status.updated.timestamp() * 1000) if status.updated else now
        if moved_ms + deadline_ms > now:
            if not dry_run:
                await ctx.redis.zadd(index, {chain_id: moved_ms + deadline_ms})
            continue
        finding = Finding(
            group_id=chain_id,
            kind=FindingKind.CHAIN_STUCK,
            action=SweepAction.REDRIVE if redrive else SweepAction.REPORT,
            applied=False,
            state=status.state.value,
            total=status.steps,
            done=status.step,
            overdue_seconds=(now - moved_ms - deadline_ms) / 1000,
            age_seconds=(now - int(status.started.timestamp() * 1000)) / 1000
            if status.started
            else 0.0,
            note=f"at step {status.step} ({status.current})",
        )
        findings.append(finding)
        if dry_run:
            continue
        look_again = now  # seen in turn with the others at the next sweep
        if redrive:
            keys = record.keys_of(ctx, chain_id)
            redrives = await ctx.redis.hincrby(keys.record, "redrives", 1)
            if redrives <= ctx.config.max_redrives and await launch.redrive(
                ctx, chain_id
            ):
                finding.applied = True
                finding.redrives = redrives
                look_again = now + deadline_ms
            else:
                finding.note += f"; not re-driven ({redrives - 1} re-drives used)"
        else:
            finding.applied = True
        await ctx.redis.zadd(index, {chain_id: look_again})
    return len(due), findings
