"""A group's progress: its counts, how fast outcomes come, the time it has left.

The counts are its status's (the meta); the pace is read off the tail of its
outcome stream, whose ids are the times Redis recorded each outcome: the
latest :data:`SAMPLE` of them, those of the last :data:`RATE_SECONDS` (or
since the group was planned, if sooner). O(1) in the group's size. With no
stream (``outcome_stream_max=0``) the pace is the average since planning.
"""

from taskiq_fanin.context import FanInContext
from taskiq_fanin.domain.results import GroupState, GroupStatus
from taskiq_fanin.domain.watching import GroupProgress
from taskiq_fanin.groups import reading
from taskiq_fanin.storage import outcome_stream
from taskiq_fanin.storage.keys import group_keys

#: Outcomes a pace is read from, at most (the latest ones).
SAMPLE = 256
#: The seconds a rate looks back over.
RATE_SECONDS = 10.0
#: Outcomes needed before a rate (and a time left) is given.
FEWEST = 3


async def group_progress(ctx: FanInContext, group_id: str) -> GroupProgress:
    """How far the group has come, and how fast (``state`` missing: no group)."""
    status = await reading.status(ctx, group_id)
    if status.state is GroupState.MISSING:
        return GroupProgress(
            group_id=group_id, state=status.state, read_at=status.read_at
        )
    key = group_keys(ctx.config.prefix, group_id).outcomes
    tail = await outcome_stream.latest(ctx.redis, key, count=SAMPLE)
    return progress_of(status, [entry.at_ms for entry in tail])


def progress_of(status: GroupStatus, times_ms: list[int]) -> GroupProgress:
    """A progress from a status and its latest outcomes' times (newest first)."""
    growing = status.planned_open and not status.sealed
    rate = _rate(status, times_ms)
    ended = status.state not in (GroupState.OPEN, GroupState.GIVING_UP)
    eta = None
    if rate and not growing and not ended:
        eta = round(status.pending / rate, 3)
    return GroupProgress(
        group_id=status.group_id,
        state=status.state,
        total=status.total,
        done=status.done,
        failed=status.failed,
        skipped=status.skipped,
        lost=status.lost,
        open=growing,
        in_flight=status.in_flight if status.max_in_flight else None,
        rate=rate,
        eta_seconds=eta,
        created=status.created,
        deadline=status.deadline,
        finished=status.finished,
        read_at=status.read_at,
    )


def _rate(status: GroupStatus, times_ms: list[int]) -> float | None:
    """Outcomes a second lately (``None`` while too few ended to tell).

    Over the last :data:`RATE_SECONDS`, or since the group was planned when
    that is sooner (a young group's members took that long to end, so its
    first outcomes count over it, not over their own instant). When even the
    latest :data:`SAMPLE` outcomes are all that recent, over the time since
    the oldest of them.
    """
    outcomes = status.done + status.failed + status.skipped
    now = status.read_at
    if outcomes < FEWEST or now is None:
        return None
    now_ms = now.timestamp() * 1000
    created_ms = None if status.created is None else status.created.timestamp() * 1000
    if not times_ms:  # no stream kept: the average since planning
        if created_ms is None:
            return None
        return round(outcomes * 1000 / max(now_ms - created_ms, 1.0), 3)
    cutoff = now_ms - RATE_SECONDS * 1000
    recent = [at for at in times_ms if at >= cutoff]
    if len(recent) < len(times_ms):  # the stream goes back past the look-back
        count, span = len(recent), RATE_SECONDS * 1000
    elif len(times_ms) < SAMPLE:  # every outcome kept is recent
        start = cutoff if created_ms is None else max(cutoff, created_ms)
        count, span = len(recent), now_ms - start
    else:  # a full sample, all recent: the outcomes after its oldest one
        count, span = len(recent) - 1, now_ms - min(recent)
    return round(count * 1000 / max(span, 1.0), 3)
