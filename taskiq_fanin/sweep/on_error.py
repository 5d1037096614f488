"""The sweep's look at a failed chain whose ``on_error`` has not run to its end.

A failed chain kicked its ``on_error``; on a broker that never redelivers
(list brokers, taskiq-redis's Cluster and Sentinel stream brokers) a copy its
run guard refused while another ran is gone, and so is the running one should
its worker die. So a failed chain stays in the chains' index until a copy of
its ``on_error`` ran to its end. It is lost once the running copy's run lease
ran out (its worker renews it while the body runs), or when no copy began
within the chain's step span of its failure; then, as the sweep's policy says,
it is reported, or with ``redrive`` kicked again (the same task id: its guard
runs one copy). An attempt that released the lease for a retry middleware's
next attempt is left to that middleware.
"""

from taskiq_fanin.chains import due, index, on_error
from taskiq_fanin.chains.cursor import ChainCursor
from taskiq_fanin.context import FanInContext
from taskiq_fanin.model.config import ms
from taskiq_fanin.model.results import SweepPolicy
from taskiq_fanin.store.records import ChainRecord
from taskiq_fanin.sweep import known
from taskiq_fanin.sweep.report import Finding, FindingKind, SweepAction


async def judge_on_error(
    ctx: FanInContext,
    chain_id: str,
    cursor: ChainCursor,
    chain: ChainRecord,
    now: int,
    *,
    policy: SweepPolicy,
    dry_run: bool,
) -> Finding | None:
    """Judge a failed chain's ``on_error`` and, unless ``dry_run``, act.

    ``cursor``: the failed step's. ``None``: it is on its way (looked at again
    when it would be lost).
    """
    lost_at, why = _lost_at(ctx, chain, now)
    if lost_at > now or cursor.on_error is None:
        if not dry_run:
            await index.reschedule(ctx, chain_id, max(lost_at - now, 0))
        return None
    redrive = policy is SweepPolicy.REDRIVE
    finding = Finding(
        group_id=chain_id,
        kind=FindingKind.ON_ERROR_LOST,
        action=SweepAction.REDISPATCH if redrive else SweepAction.REPORT,
        applied=False,
        state=chain.state.value,
        total=chain.steps,
        done=cursor.index,
        overdue_seconds=(now - lost_at) / 1000,
        age_seconds=(now - (chain.started_at or now)) / 1000,
        note=f"its on_error ({cursor.on_error.task_name}) {why}",
    )
    if known.tasks_checked(ctx):
        finding.unknown_tasks = known.unknown_in_step(ctx, cursor.on_error)
    if finding.unknown_tasks:
        left = "not kicked again: " if redrive else ""
        finding.note += f"; {left}{known.unknown_note(finding.unknown_tasks)}"
    if dry_run:
        return finding
    look_again = 0  # reported: seen in turn with the others at the next sweep
    if not redrive:
        finding.applied = True
    elif not finding.unknown_tasks:
        await on_error.kick_again(ctx, cursor, chain)
        finding.applied = True
        look_again = due.deadline_ms(ctx, chain)  # time for the copy to begin
    await index.reschedule(ctx, chain_id, look_again)
    return finding


def _lost_at(ctx: FanInContext, chain: ChainRecord, now: int) -> tuple[int, str]:
    """When the chain's ``on_error`` counts as lost (epoch ms), and why.

    A copy that began: when its run lease runs out (a copy released for its
    retry is never lost: looked at again a lease later). None began: a step
    span after the chain failed.
    """
    if chain.on_error_state == on_error.RUNNING:
        if chain.on_error_until:
            return chain.on_error_until, "did not complete within its run lease"
        return now + ms(ctx.config.lease), "is released for its retry"
    failed_at = chain.finished_at or chain.updated_at or now
    return failed_at + due.deadline_ms(ctx, chain), "was kicked; no copy began"
