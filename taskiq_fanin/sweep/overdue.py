"""The sweep's look at a group whose continuation is overdue.

Dispatched (or running) and not completed a span after its dispatch, with no
copy's run lease held: its message was lost, or every worker that began it
died. As the sweep's policy says, it is reported, or with ``redrive``
dispatched again (the same task id: its guard runs one copy; it goes as the
attempt after the recorded one), at most ``max_redrives`` times, then reported
only: ``checkContinuation`` rechecks it on Redis's clock (writing nothing),
the sweep kicks it, and ``countRedispatch`` counts the kick once it returned,
so a kick that failed spends no count (the next sweep dispatches it again).
Each copy dispatched again has a span to begin before the next.
"""

from taskiq_fanin.context import FanInContext
from taskiq_fanin.domain.config import ms
from taskiq_fanin.groups import group_index
from taskiq_fanin.groups.finalising import finalise
from taskiq_fanin.storage.keys import GroupKeys
from taskiq_fanin.storage.rechecks import Lost
from taskiq_fanin.storage.records import GroupMeta
from taskiq_fanin.sweep.report import Finding, FindingKind, SweepAction


async def judge(
    ctx: FanInContext,
    finding: Finding,
    meta: GroupMeta,
    *,
    redrive: bool,
    dry_run: bool,
    claimant: str,
) -> Finding | None:
    """Make ``finding`` an overdue continuation's and, unless ``dry_run``, act.

    Its ``redrives``: the continuation's re-dispatches (not its members').
    ``claimant``: who the sweep finalises as. ``None``: on its way after all, on
    Redis's clock (looked at again a lease later).
    """
    finding.kind = FindingKind.CONTINUATION_OVERDUE
    finding.action = SweepAction.REDISPATCH if redrive else SweepAction.REPORT
    finding.redrives = meta.continuation_redrives
    if redrive and meta.continuation_redrives >= ctx.config.max_redrives:
        finding.capped("dispatched", f"{meta.continuation_redrives} re-dispatches")
    if dry_run:
        return finding
    if finding.action is SweepAction.REDISPATCH:
        after = await _dispatch_again(ctx, finding, meta, claimant)
        if after is None:
            await group_index.reschedule(
                ctx, finding.group_id, ms(ctx.config.finaliser_lease)
            )
            return None
    else:
        finding.applied, after = True, 0  # reported: seen in turn with the others
    await group_index.reschedule(ctx, finding.group_id, after)
    return finding


async def _dispatch_again(
    ctx: FanInContext, finding: Finding, meta: GroupMeta, claimant: str
) -> int | None:
    """Dispatch it again unless its re-dispatches are used up; when to look again.

    ``None``: not overdue after all (``checkContinuation``). Counted only once
    its kick returned (``countRedispatch``): a kick that raised spends nothing.
    """
    group_id = finding.group_id
    keys = GroupKeys(ctx.config.prefix, group_id)
    checked = await ctx.scripts.check_continuation(
        keys, token=meta.token, max_redrives=ctx.config.max_redrives
    )
    finding.redrives = checked.redrives
    if checked.lost is Lost.ON_ITS_WAY:
        return None
    finding.applied = True
    if checked.lost is Lost.CAPPED:
        finding.capped("dispatched", f"{checked.redrives} re-dispatches")
        return 0
    counted: list[int | None] = []

    async def count() -> None:
        counted.append(await ctx.scripts.count_redispatch(keys, token=meta.token))

    # Counted once the kick returned, before the dispatch is recorded: a copy
    # that went is counted even when recording its dispatch then fails.
    await finalise(
        ctx,
        group_id,
        meta.token,
        claimant=claimant,
        attempt=checked.attempt,
        kicked=count,
    )
    # Not counted (``None``): it ended meanwhile; this copy went all the same.
    (now_counted,) = counted or [None]
    finding.redrives = checked.redrives + 1 if now_counted is None else now_counted
    # The copy's span to begin (begun, its run lease renewed meanwhile).
    return max(meta.deadline_ms, ms(ctx.config.finaliser_lease))
