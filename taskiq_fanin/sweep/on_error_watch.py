"""The sweep's look at a failed chain whose ``on_error`` has not run to its end.

A failed chain kicked its ``on_error``; on a broker that never redelivers
(list brokers, taskiq-redis's Cluster and Sentinel stream brokers) a copy its
run guard refused while another ran is gone, and so is the running one should
its worker die. So a failed chain stays in the chains' index until a copy of
its ``on_error`` ran to its end. It is lost once the running copy's run lease
ran out (its worker renews it while the body runs), or when no copy began
within the chain's step span of its failure; then, as the sweep's policy says,
it is reported, or with ``redrive`` kicked again (the same task id: its guard
runs one copy; it goes as the attempt after the recorded one), at most
``max_redrives`` times, then reported only: ``checkOnError`` rechecks it on
Redis's clock (writing nothing), the sweep kicks it, and ``countRekick``
counts the kick once it returned, so a kick that failed spends no count (the
next sweep kicks it again). An attempt that released the lease for a retry
middleware's next attempt is left to that middleware for a span; past it, the
retry is lost too.
"""

from taskiq_fanin.chains import (
    chain_index,
    due,
    error_continuation,
    record,
)
from taskiq_fanin.chains.cursor import ChainCursor
from taskiq_fanin.context import FanInContext
from taskiq_fanin.domain.config import ms
from taskiq_fanin.domain.results import SweepPolicy
from taskiq_fanin.storage.rechecks import Lost
from taskiq_fanin.storage.records import ChainRecord
from taskiq_fanin.sweep import known
from taskiq_fanin.sweep.report import Finding, FindingKind, SweepAction


async def judge_on_error(
    ctx: FanInContext,
    chain_id: str,
    cursor: ChainCursor,
    chain: ChainRecord,
    now: int,
    *,
    sweep_policy: SweepPolicy,
    dry_run: bool,
) -> Finding | None:
    """Judge a failed chain's ``on_error`` and, unless ``dry_run``, act.

    ``cursor``: the failed step's. ``None``: it is on its way (looked at again
    when it would be lost).
    """
    lost_at, why = _lost_at(ctx, chain, now)
    if lost_at > now or cursor.on_error is None:
        if not dry_run:
            await chain_index.reschedule(ctx, chain_id, max(lost_at - now, 0))
        return None
    redrive = sweep_policy is SweepPolicy.REDRIVE
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
        redrives=chain.on_error_redrives,
        note=f"its on_error ({cursor.on_error.task_name}) {why}",
    )
    if known.tasks_checked(ctx):
        finding.unknown_tasks = known.unknown_in_step(ctx, cursor.on_error)
    if finding.unknown_tasks:
        left = "not kicked again: " if redrive else ""
        finding.note += f"; {left}{known.unknown_note(finding.unknown_tasks)}"
    if redrive and chain.on_error_redrives >= ctx.config.max_redrives:
        finding.capped("kicked", f"{chain.on_error_redrives} re-kicks")
        redrive = False
    if dry_run:
        return finding
    look_again = 0  # reported: seen in turn with the others at the next sweep
    if not redrive:
        finding.applied = True
    elif not finding.unknown_tasks:
        after = await _kick_again(ctx, chain_id, cursor, chain, finding)
        if after is None:  # on its way after all (Redis's clock, now)
            await chain_index.reschedule(ctx, chain_id, ms(ctx.config.finaliser_lease))
            return None
        look_again = after
    await chain_index.reschedule(ctx, chain_id, look_again)
    return finding


async def _kick_again(
    ctx: FanInContext,
    chain_id: str,
    cursor: ChainCursor,
    chain: ChainRecord,
    finding: Finding,
) -> int | None:
    """Kick it again unless its re-kicks are used up; when to look again (ms).

    ``None``: not lost after all, rechecked on Redis's clock (``checkOnError``).
    Counted only once its kick returned (``countRekick``): a kick that raised
    spends nothing.
    """
    keys = record.keys_of(ctx, chain_id)
    checked = await ctx.chain_scripts.check_on_error(
        keys,
        token=chain.token,
        max_redrives=ctx.config.max_redrives,
        deadline_ms=ms(ctx.config.deadline),
    )
    finding.redrives = checked.redrives
    if checked.lost is Lost.ON_ITS_WAY:
        return None
    if checked.lost is Lost.CAPPED:
        finding.capped("kicked", f"{checked.redrives} re-kicks")
        finding.applied = True
        return 0
    await error_continuation.kick_again(ctx, cursor, chain, attempt=checked.attempt)
    finding.applied = True
    counted = await ctx.chain_scripts.count_rekick(keys, token=chain.token)
    # Not counted (``None``): it ended meanwhile; this copy went all the same.
    finding.redrives = checked.redrives + 1 if counted is None else counted
    return due.deadline_ms(ctx, chain)  # time for the copy to begin


def _lost_at(ctx: FanInContext, chain: ChainRecord, now: int) -> tuple[int, str]:
    """When the chain's ``on_error`` counts as lost (epoch ms), and why.

    A copy that began: when its run lease runs out; released for its retry,
    when the retry was due to have begun (``on_error_retry_by``; a record from
    before it: looked at again a lease later). None began: a step span after
    the chain failed. As ``checkOnError`` rechecks it.
    """
    if chain.on_error_state == error_continuation.RUNNING:
        if chain.on_error_until:
            return chain.on_error_until, "did not complete within its run lease"
        if chain.on_error_retry_by:
            return chain.on_error_retry_by, "was released; its retry did not begin"
        return now + ms(ctx.config.finaliser_lease), "is released for its retry"
    failed_at = chain.finished_at or chain.updated_at or now
    return failed_at + due.deadline_ms(ctx, chain), "was kicked; no copy began"
