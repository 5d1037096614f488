"""The sweep's judgement of one group, and what it does about it.

Each group is judged from its own keys: stuck (open past its deadline), never
fully planned, planned open and never sealed, a finaliser that died before
dispatching, or a continuation overdue; what is done follows the group's
sweep policy or the caller's override.
"""

from dataclasses import dataclass

from taskiq_fanin import metrics
from taskiq_fanin.context import CLAIMANT, FanInContext
from taskiq_fanin.domain.config import ms
from taskiq_fanin.domain.results import GroupState, SweepPolicy
from taskiq_fanin.domain.spec import member_from_ledger
from taskiq_fanin.groups import group_index, reading
from taskiq_fanin.groups.finalising import finalise
from taskiq_fanin.groups.window import kick_rows
from taskiq_fanin.storage.keys import GroupKeys
from taskiq_fanin.storage.records import GroupMeta
from taskiq_fanin.storage.replies import Inspected
from taskiq_fanin.sweep import giving_up, known, overdue
from taskiq_fanin.sweep.report import Finding, FindingKind, SweepAction

#: Who the sweep claims a finaliser's lease as.
SWEEP_CLAIMANT = f"sweep:{CLAIMANT}"
#: The most ledger indexes one visit goes over: a re-drive pass over a wider
#: group goes on window by window, one per visit, each visit's work bounded.
REDRIVE_WINDOW = 1_000
#: The most missing members a finding names (``missing_count`` counts them all).
SAMPLE = 20


async def judge(
    ctx: FanInContext,
    group_id: str,
    *,
    override: SweepPolicy | None,
    dry_run: bool,
) -> Finding | None:
    """Judge one indexed group and, unless ``dry_run``, act; ``None``: on time."""
    keys = GroupKeys(ctx.config.prefix, group_id)
    inspected = await ctx.scripts.inspect_group(keys)
    state = inspected.meta.state if inspected else GroupState.MISSING
    if inspected is None or state in (GroupState.COMPLETED, GroupState.CANCELLED):
        if not dry_run:
            await group_index.remove(ctx, group_id)
        return Finding(
            group_id=group_id,
            kind=FindingKind.GONE,
            action=SweepAction.PRUNE,
            applied=not dry_run,
            state=state.value,
        )
    meta, now = inspected.meta, inspected.now_ms
    due_at = reading.due_at(meta, state)
    leased = reading.leased(inspected)
    # A pass under way (re-drive, give-up) goes on at once, whatever the deadline.
    passing = state is GroupState.GIVING_UP or (
        state is GroupState.OPEN and meta.redrive_next > 0
    )
    if (due_at > now or leased) and not passing:
        # Not stuck after all (the index is only a hint): look again later.
        if not dry_run:
            after = max(due_at - now, ms(ctx.config.finaliser_lease))
            await group_index.reschedule(ctx, group_id, after)
        return None
    finding = _finding(group_id, state, inspected, now, due_at)
    if state in (GroupState.DISPATCHED, GroupState.RUNNING):
        redrive = _policy(meta, override) is SweepPolicy.REDRIVE
        return await overdue.judge(
            ctx,
            finding,
            meta,
            redrive=redrive,
            dry_run=dry_run,
            claimant=SWEEP_CLAIMANT,
        )
    if state is GroupState.CLAIMED:
        finding.kind, finding.action = (
            FindingKind.FINALISER_LOST,
            SweepAction.REDISPATCH,
        )
    else:
        finding.kind = _kind(meta)
        finding.action = SweepAction(_policy(meta, override).value)
    window = Window(0, 0, {})
    unknown: set[int] = set()
    if state in (GroupState.OPEN, GroupState.GIVING_UP):
        # Only a re-drive goes on where its pass is; a sample starts at 0.
        start = meta.redrive_next if finding.action is SweepAction.REDRIVE else 0
        # A windowed group's unreleased members wait their turn: never kicked here.
        stop = min(start + REDRIVE_WINDOW, meta.released)
        window = Window(
            start, stop, await ctx.scripts.missing_members(keys, start, stop)
        )
        finding.missing = sorted(window.members)[:SAMPLE]
        if finding.action in (SweepAction.REDRIVE, SweepAction.REPORT):
            unknown = _unknown_members(ctx, finding, window.members)
    if dry_run:
        return finding
    await _act(ctx, finding, meta, window, unknown)
    return finding


@dataclass(frozen=True)
class Window:
    """The ledger indexes [start, stop) one visit went over, and their missing."""

    start: int
    stop: int
    #: The ledger entries of the members in it with no outcome.
    members: dict[int, str]


def _unknown_members(
    ctx: FanInContext, finding: Finding, entries: dict[int, str]
) -> set[int]:
    """The missing members whose task the broker does not know: never re-driven.

    Named in the finding (``unknown_tasks`` and its note). Nothing is checked
    when the broker knows none of the user's tasks (``known.tasks_checked``).
    """
    if not entries or not known.tasks_checked(ctx):
        return set()
    unknown: dict[int, list[str]] = {}
    for member_index, entry in entries.items():
        names = known.unknown_in_member(ctx, member_from_ledger(entry))
        if names:
            unknown[member_index] = names
    if unknown:
        names = list(dict.fromkeys(n for found in unknown.values() for n in found))
        finding.unknown_tasks = names
        count = f"{len(unknown)} member{'s' if len(unknown) > 1 else ''}"
        left = " not re-driven" if finding.action is SweepAction.REDRIVE else ""
        finding.note = f"{count}{left}: {known.unknown_note(names)}"
    return set(unknown)


def _kind(meta: GroupMeta) -> FindingKind:
    """Why an open group past its deadline is stuck."""
    if not meta.planned:
        return FindingKind.UNPLANNED
    if meta.open and not meta.sealed:
        return FindingKind.UNSEALED
    return FindingKind.STUCK


def _policy(meta: GroupMeta, override: SweepPolicy | None) -> SweepPolicy:
    """The caller's, else the group's (``report`` should its meta not say).

    A give-up under way goes on whatever is asked: there is no way back.
    """
    if meta.state is GroupState.GIVING_UP:
        return SweepPolicy.GIVE_UP
    return override or meta.sweep_policy or SweepPolicy.REPORT


def _finding(
    group_id: str, state: GroupState, inspected: Inspected, now: int, due_at: int
) -> Finding:
    meta = inspected.meta
    return Finding(
        group_id=group_id,
        kind=FindingKind.STUCK,
        action=SweepAction.REPORT,
        applied=False,
        state=state.value,
        total=meta.total,
        done=meta.done,
        failed=meta.failed,
        # Of a windowed group, those released: the others wait their turn.
        missing_count=max(meta.released - meta.done - meta.failed, 0),
        age_seconds=(now - (meta.created_at or now)) / 1000,
        overdue_seconds=max(now - due_at, 0) / 1000,
        redrives=meta.redrives,
    )


async def _act(
    ctx: FanInContext,
    finding: Finding,
    meta: GroupMeta,
    window: Window,
    unknown: set[int],
) -> None:
    """Do the finding's action; ``unknown``: missing members not to re-drive."""
    keys = GroupKeys(ctx.config.prefix, finding.group_id)
    token, action = meta.token, finding.action
    # A group left as it was goes to the back of the due queue: every stuck group
    # is seen in turn, however many there are.
    look_again = 0
    if action is SweepAction.REDRIVE:
        # Members whose task is unknown are left: when they are all there is,
        # nothing is kicked and no re-drive is spent.
        kick = {i: e for i, e in window.members.items() if i not in unknown}
        whole = window.start == 0 and window.stop >= meta.released
        if kick or not whole:
            look_again = await _redrive(ctx, finding, meta, window, kick)
    elif action is SweepAction.GIVE_UP:
        visit = await giving_up.give_up(
            ctx, finding.group_id, meta, claimant=SWEEP_CLAIMANT
        )
        finding.applied, finding.note = visit.applied, visit.note(meta.total)
        if visit.finalised:
            return
    elif action is SweepAction.REDISPATCH:  # a finaliser lost: none began
        if not await ctx.scripts.reclaim_finaliser(
            keys,
            token=token,
            lease_ms=ms(ctx.config.finaliser_lease),
            claimant=SWEEP_CLAIMANT,
        ):
            finding.note = "the finaliser's lease was taken meanwhile"
            return
        await finalise(ctx, finding.group_id, token, claimant=SWEEP_CLAIMANT)
        finding.applied = True
        return
    else:
        finding.applied = True
    await group_index.reschedule(ctx, finding.group_id, look_again)


async def _redrive(
    ctx: FanInContext,
    finding: Finding,
    meta: GroupMeta,
    window: Window,
    kick: dict[int, str],
) -> int:
    """Kick the window's missing members (``kick``) again; when to look again (ms).

    The pass's last window over an unplanned group marks it planned: the sweep
    has finished what its planner left.
    """
    keys = GroupKeys(ctx.config.prefix, finding.group_id)
    token = meta.token
    redriven = await ctx.scripts.redrive_group(
        keys,
        token=token,
        max_redrives=ctx.config.max_redrives,
        start=window.start,
        stop=window.stop,
    )
    finding.redrives = redriven.redrives
    if not redriven.redriven:
        used = f"not re-driven: {redriven.redrives} re-drives used"
        finding.note = "; ".join(filter(None, (finding.note, used)))
        return 0
    await kick_rows(
        ctx,
        finding.group_id,
        token,
        kick,
        depth=meta.depth,
        cancellable=meta.cancellable,
        attempt=redriven.redrives,
    )
    metrics.MEMBERS_REDRIVEN.inc(len(kick))
    finding.applied = True
    if not redriven.over:
        return 0  # the next window at the next visit
    if not meta.planned:
        await ctx.scripts.mark_planned(keys, token=token)
    return meta.deadline_ms  # its new deadline
