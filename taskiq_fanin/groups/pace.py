"""A group's progress: its counts, how fast outcomes come, the time it has left.

The counts are its status's (the meta); the pace is counted on its outcome
stream, whose ids are the times Redis recorded each outcome and whose entries
each carry the group's count of outcomes so far: the outcomes of the last
:data:`RATE_SECONDS` (or since the group was planned, if sooner) are the
newest entry's count less that of the newest entry before them. Three entries
read, O(1) in the group's size. With no stream (``outcome_stream_max=0``), or
entries that carry no count (written by an older version), the pace is the
average since planning.
"""

from taskiq_fanin.context import FanInContext
from taskiq_fanin.domain.results import GroupState, GroupStatus
from taskiq_fanin.domain.watching import GroupProgress
from taskiq_fanin.groups import reading
from taskiq_fanin.storage import outcome_stream
from taskiq_fanin.storage.keys import group_keys
from taskiq_fanin.storage.outcome_stream import PaceMarks

#: The seconds a rate looks back over.
RATE_SECONDS = 10.0
#: Outcomes needed before a rate (and a time left) is given.
FEWEST = 3
#: A stream with no entry.
NO_MARKS = PaceMarks(before=None, oldest=None, newest=None)


async def group_progress(ctx: FanInContext, group_id: str) -> GroupProgress:
    """How far the group has come, and how fast (``state`` missing: no group)."""
    status = await reading.status(ctx, group_id)
    if status.state is GroupState.MISSING:
        return GroupProgress(
            group_id=group_id, state=status.state, read_at=status.read_at
        )
    if status.read_at is None:  # no clock read: no rate to give
        return progress_of(status)
    key = group_keys(ctx.config.prefix, group_id).outcomes
    since_ms = int(status.read_at.timestamp() * 1000 - RATE_SECONDS * 1000)
    marks = await outcome_stream.pace_marks(ctx.redis, key, since_ms=since_ms)
    return progress_of(status, marks)


def progress_of(status: GroupStatus, marks: PaceMarks = NO_MARKS) -> GroupProgress:
    """A progress from a status and the stream entries its pace is counted on."""
    growing = status.planned_open and not status.sealed
    rate = _rate(status, marks)
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


def _rate(status: GroupStatus, marks: PaceMarks) -> float | None:
    """Outcomes a second lately (``None`` while too few ended to tell).

    Over the last :data:`RATE_SECONDS`, or since the group was planned when
    that is sooner (a young group's members took that long to end, so its
    first outcomes count over it, not over their own instant). When the
    stream no longer keeps the look-back's start (trimmed to
    ``outcome_stream_max``), over the time since its oldest entry.
    """
    outcomes = status.done + status.failed + status.skipped
    now = status.read_at
    if outcomes < FEWEST or now is None:
        return None
    now_ms = now.timestamp() * 1000
    created_ms = None if status.created is None else status.created.timestamp() * 1000
    counted = _counted(marks, now_ms - RATE_SECONDS * 1000, created_ms)
    if counted is not None:
        count, start_ms = counted
    elif created_ms is not None:  # no stream, or no counts on it
        count, start_ms = outcomes, created_ms
    else:
        return None
    return round(count * 1000 / max(now_ms - start_ms, 1.0), 3)


def _counted(
    marks: PaceMarks, since_ms: float, created_ms: float | None
) -> tuple[int, float] | None:
    """Outcomes recorded since a moment, and that moment, by the stream's counts."""
    before, oldest, newest = marks.before, marks.oldest, marks.newest
    if newest is None or newest.ordinal is None:
        return None
    if before is not None:  # the newest entry before the look-back
        if before.ordinal is None:
            return None
        return newest.ordinal - before.ordinal, since_ms
    if oldest is None or oldest.ordinal is None:
        return None
    if oldest.ordinal == 1:  # every outcome is kept, all within the look-back
        start = since_ms if created_ms is None else max(since_ms, created_ms)
        return newest.ordinal, start
    # Trimmed past the look-back's start: the outcomes after its oldest entry.
    return newest.ordinal - oldest.ordinal, oldest.at_ms
