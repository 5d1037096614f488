"""Following a group's outcomes as they are recorded, from its outcome stream.

A reader reads pages after its cursor; once it has read all there is, it asks
whether the group can still record one (its state), then waits on the stream
for the next. A group past open records no outcome any more (the move out of
open and the last outcome are one script call), so a reader that has read
everything after that has read the group's end. A reader that starts late
reads from the start; the stream keeps the latest ``outcome_stream_max``.
"""

import json
from collections.abc import AsyncIterator
from datetime import datetime, timezone

from taskiq_fanin.context import FanInContext
from taskiq_fanin.domain.exceptions import GroupNotFoundError
from taskiq_fanin.domain.results import GroupState, MemberError
from taskiq_fanin.domain.watching import MemberOutcome
from taskiq_fanin.storage import outcome_stream
from taskiq_fanin.storage.keys import group_keys, validate_group_id
from taskiq_fanin.storage.outcome_stream import StreamEntry
from taskiq_fanin.storage.records import GroupMeta

#: Outcomes one read takes at most.
PAGE = 256
#: How long one wait for a new outcome lasts at most (seconds); a group that
#: ends without one more (a cancel, a give-up) is seen ended after it.
WAIT_SECONDS = 1.0


def follow(
    ctx: FanInContext, group_id: str, *, after: str | None = None
) -> AsyncIterator[MemberOutcome]:
    """Each outcome after ``after`` (from the start: ``None``), until the group ends.

    A bad id or cursor raises here; the iteration raises ``GroupNotFoundError``
    when Redis holds no such group.
    """
    validate_group_id(group_id, derived=True)
    return _follow(ctx, group_id, outcome_stream.checked_cursor(after))


async def _follow(
    ctx: FanInContext, group_id: str, cursor: str
) -> AsyncIterator[MemberOutcome]:
    key = group_keys(ctx.config.prefix, group_id).outcomes
    redis = ctx.redis
    # Below the socket timeout: a wait must not look like Redis being away.
    block_ms = max(1, int(min(WAIT_SECONDS, ctx.config.socket_timeout / 2) * 1000))
    known = False
    while True:
        page = await outcome_stream.read_after(redis, key, cursor, count=PAGE)
        for entry in page:
            yield member_outcome(entry)
            cursor = entry.cursor
        if len(page) == PAGE:
            continue
        state = await _state(ctx, group_id)
        if state is GroupState.MISSING:
            if known:
                return  # it ended and expired meanwhile
            raise GroupNotFoundError(group_id=group_id)
        known = True
        if state not in (GroupState.OPEN, GroupState.GIVING_UP):
            while page := await outcome_stream.read_after(
                redis, key, cursor, count=PAGE
            ):
                for entry in page:
                    yield member_outcome(entry)
                    cursor = entry.cursor
            return
        waited = await outcome_stream.wait_after(
            redis, key, cursor, count=PAGE, block_ms=block_ms
        )
        for entry in waited:
            yield member_outcome(entry)
            cursor = entry.cursor


async def _state(ctx: FanInContext, group_id: str) -> GroupState:
    """The group's state now (``missing``: Redis holds no such group)."""
    meta_key = group_keys(ctx.config.prefix, group_id).meta
    field = GroupMeta.stored_as("state")
    raw = await ctx.redis.hget(meta_key, field)
    if raw is None:
        return GroupState.MISSING
    return GroupMeta.from_hash({field: raw}).state


def member_outcome(entry: StreamEntry) -> MemberOutcome:
    """A stream entry as the reader gets it: the result or error decoded."""
    result, error = None, None
    if entry.cut:
        pass  # too large for the stream: the group's result holds it
    elif entry.outcome == "done" and entry.payload:
        result = json.loads(entry.payload)
    elif entry.outcome == "failed":
        error = (
            MemberError.model_validate_json(entry.payload)
            if entry.payload
            else MemberError(type="UnknownError", message="")
        )
    elif entry.outcome == "skipped":
        reason = json.loads(entry.payload) if entry.payload else ""
        error = MemberError(type="Skip", message=str(reason))
    return MemberOutcome(
        index=entry.index,
        state=entry.outcome,  # type: ignore[arg-type]
        result=result,
        error=error,
        kept=not entry.cut,
        cursor=entry.cursor,
        at=datetime.fromtimestamp(entry.at_ms / 1000, tz=timezone.utc),
    )
