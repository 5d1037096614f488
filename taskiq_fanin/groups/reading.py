"""Reading groups back: the status of one, and the listing of open and stuck ones."""

from datetime import datetime, timezone

from taskiq_fanin.context import FanInContext
from taskiq_fanin.domain.config import positive
from taskiq_fanin.domain.results import GroupState, GroupStatus, from_millis
from taskiq_fanin.storage.keys import (
    GroupKeys,
    index_key,
    validate_group_id,
)
from taskiq_fanin.storage.records import GroupMeta, read_indexed
from taskiq_fanin.storage.replies import Inspected

#: The most groups one listing reads.
DEFAULT_LIST_LIMIT = 1000
#: The meta fields a status reads: every one, none of which grows with the group.
STATUS_FIELDS = list(GroupMeta.STORED.values())
#: What a listing leaves out: groups over, or gone.
FINISHED = frozenset({GroupState.COMPLETED, GroupState.CANCELLED, GroupState.MISSING})


def due_at(meta: GroupMeta, state: GroupState) -> int:
    """When a group in this state stops being on time (epoch ms), as the sweep judges.

    Its deadline while open (a windowed group's slides); a claimed group's at
    once, unless its finaliser's lease holds (:func:`leased`); a dispatched
    continuation's a span after its dispatch, or after the sweep last
    dispatched it again (its claim's, its dispatch not recorded); a lease
    released for its retry, not before the retry's span to begin
    (``run_retry_by``), as ``checkContinuation`` rechecks it.
    """
    if state in (GroupState.DISPATCHED, GroupState.RUNNING):
        sent = meta.dispatched_at or meta.claimed_at or meta.started_at
        since = max(sent or 0, meta.continuation_redriven_at or 0)
        return max(since + meta.deadline_ms, meta.retry_due_at or 0)
    if state is GroupState.CLAIMED:
        return meta.claimed_at or 0
    return meta.due_at or 0


def leased(inspected: Inspected) -> bool:
    """Its finaliser's lease, or its continuation's run lease, still holds."""
    meta, state = inspected.meta, inspected.meta.state
    return (state is GroupState.CLAIMED and inspected.lease_held) or (
        state is GroupState.RUNNING and meta.run_until > inspected.now_ms
    )


def status_from_meta(
    group_id: str, meta: GroupMeta, *, read_at: datetime | None = None
) -> GroupStatus:
    """A ``GroupStatus`` from a group's meta (state ``missing``: the group is).

    ``read_at``: Redis's clock when the meta was read.
    """
    if meta.state is GroupState.MISSING:
        return GroupStatus(group_id=group_id, state=GroupState.MISSING, read_at=read_at)
    return GroupStatus(
        group_id=group_id,
        state=meta.state,
        total=meta.total,
        done=meta.done - meta.skipped,  # the meta counts a skip among the done
        failed=meta.failed,
        skipped=meta.skipped,
        lost=meta.lost,
        failure_policy=meta.failure_policy,
        sweep_policy=meta.sweep_policy,
        created=from_millis(meta.created_at),
        deadline=from_millis(meta.due_at),
        finished=from_millis(meta.finished_at),
        planned=meta.planned,
        redrives=meta.redrives,
        max_in_flight=meta.max_in_flight,
        in_flight=meta.in_flight,
        waiting=meta.waiting,
        version=meta.version or None,
        name=meta.workflow or None,
        planned_open=meta.open,
        sealed=meta.sealed,
        read_at=read_at,
    )


async def status(ctx: FanInContext, group_id: str) -> GroupStatus:
    """Counts, state and times of a group, read from its own keys.

    With Redis's clock at the read, which its age and ``overdue()`` go by.
    """
    validate_group_id(group_id, derived=True)
    # Named fields, each of a fixed size: a status costs the same at any size.
    values = await ctx.redis.hmget(
        GroupKeys(ctx.config.prefix, group_id).meta, STATUS_FIELDS
    )
    raw = {f: v for f, v in zip(STATUS_FIELDS, values, strict=True) if v is not None}
    meta = GroupMeta.from_hash(raw)
    read_at = datetime.fromtimestamp(await ctx.redis_now(), tz=timezone.utc)
    return status_from_meta(group_id, meta, read_at=read_at)


async def list_groups(
    ctx: FanInContext,
    *,
    stuck: bool = False,
    limit: int = DEFAULT_LIST_LIMIT,
    now: datetime | None = None,
) -> list[GroupStatus]:
    """Groups in the sweep's index not finished yet, soonest due first.

    With ``stuck``, only those still open past their deadline, on Redis's clock
    (unless ``now`` says otherwise).
    """
    positive("limit", limit)
    found = await read_indexed(
        ctx.redis,
        index_key(ctx.config.prefix),
        limit,
        lambda group_id: GroupKeys(ctx.config.prefix, group_id).meta,
        GroupMeta,
    )
    if now is None:
        now = datetime.fromtimestamp(await ctx.redis_now(), tz=timezone.utc)
    statuses = [
        status_from_meta(group_id, meta, read_at=now) for group_id, meta in found
    ]
    return [
        status
        for status in statuses
        if status.state not in FINISHED and (not stuck or status.overdue(now))
    ]
