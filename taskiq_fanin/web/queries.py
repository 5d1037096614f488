"""What the pages read: bounded pages of the indexes and of one group's members.

Nothing here reads a whole group or a whole index. A listing reads ``limit``
ids of the sweep's index from ``offset`` (``ZRANGE``) and their records in one
pipeline, with the index's size and how many entries are due (``ZCARD``,
``ZCOUNT``: logarithmic). A group's members are read a page of indexes at a
time (``SMISMEMBER`` of the done and failed sets, ``HMGET`` of the results and
errors), its failures a bounded ``SSCAN`` at a time.
"""

import json
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from taskiq_fanin.api.broker import context_of
from taskiq_fanin.api.control import chain_status, group_status
from taskiq_fanin.chains.record import status_from_record
from taskiq_fanin.context import FanInContext
from taskiq_fanin.domain.results import (
    ChainState,
    ChainStatus,
    GroupState,
    GroupStatus,
    MemberError,
)
from taskiq_fanin.domain.signature import Signature
from taskiq_fanin.domain.watching import MemberOutcome
from taskiq_fanin.groups.outcome_follower import member_outcome
from taskiq_fanin.groups.reading import status_from_meta
from taskiq_fanin.storage import outcome_stream
from taskiq_fanin.storage.keys import (
    ChainKeys,
    GroupKeys,
    chain_index_key,
    group_keys,
    index_key,
)
from taskiq_fanin.storage.records import ChainRecord, GroupMeta, read_indexed
from taskiq_fanin.storage.records.fields import text
from taskiq_fanin.storage.replies import SKIP_FIELD
from taskiq_fanin.worker.middleware import FanInMiddleware

#: Rows of a listing, members of a group's page, failures shown: per page.
PAGE = 50
#: The most rows a page may ask for (``?limit=``).
MOST = 500
#: The most ids the page remembers having seen open (to show them finished).
REMEMBERED = 200
#: States past which a group is over.
GROUP_OVER = frozenset({GroupState.COMPLETED, GroupState.CANCELLED})
#: The steps' compensations a chain's page shows.
COMPENSATIONS_SHOWN = 50


@dataclass
class Listing:
    """A page of one index: its rows, the index's size and how many are due."""

    rows: list[Any]
    total: int
    due: int
    offset: int
    limit: int


@dataclass
class Member:
    """One member's outcome as its group's keys hold it now."""

    index: int
    state: str  # done, failed, skipped or pending
    result: Any = None
    error: MemberError | None = None


@dataclass
class Seen:
    """Ids the index page listed open, newest last, to tell when they finished.

    The sweep's indexes hold the groups and chains not over yet, and nothing
    lists the finished ones; so "recently finished" is what this process saw
    open and finds over since (a group's tombstone, a chain's record), at most
    ``REMEMBERED`` of each kind, forgotten on restart.
    """

    groups: OrderedDict[str, None] = field(default_factory=OrderedDict)
    chains: OrderedDict[str, None] = field(default_factory=OrderedDict)

    @staticmethod
    def note(seen: OrderedDict[str, None], ids: list[str]) -> None:
        """Remember ``ids`` as open, the oldest forgotten past the bound."""
        for item in ids:
            seen[item] = None
            seen.move_to_end(item)
        while len(seen) > REMEMBERED:
            seen.popitem(last=False)


async def now_of(fanin: FanInMiddleware) -> datetime:
    """Redis's clock, which ages and deadlines go by."""
    return datetime.fromtimestamp(await fanin.context.redis_now(), tz=timezone.utc)


async def _counts(ctx: FanInContext, key: str, now: datetime) -> tuple[int, int]:
    """The index's size, and how many of its entries are due (the sweep's next)."""
    now_ms = int(now.timestamp() * 1000)
    async with ctx.redis.pipeline(transaction=False) as pipe:
        pipe.zcard(key)
        pipe.zcount(key, "-inf", now_ms)
        total, due = await pipe.execute()
    return int(total), int(due)


async def group_page(
    fanin: FanInMiddleware, offset: int, limit: int, now: datetime
) -> Listing:
    """``limit`` groups of the index from ``offset``, soonest due first."""
    ctx = context_of(fanin)
    prefix = ctx.config.prefix
    found = await read_indexed(
        ctx.redis,
        index_key(prefix),
        limit,
        lambda group_id: GroupKeys(prefix, group_id).meta,
        GroupMeta,
        start=offset,
    )
    rows = [status_from_meta(gid, meta, read_at=now) for gid, meta in found]
    total, due = await _counts(ctx, index_key(prefix), now)
    return Listing(rows, total, due, offset, limit)


async def chain_page(
    fanin: FanInMiddleware, offset: int, limit: int, now: datetime
) -> Listing:
    """``limit`` chains of the index from ``offset``, soonest due first.

    A running chain is read again as ``status()`` reads it, so that waiting on
    a group step on time it is not called overdue (as the sweep judges it).
    """
    ctx = context_of(fanin)
    prefix = ctx.config.prefix
    found = await read_indexed(
        ctx.redis,
        chain_index_key(prefix),
        limit,
        lambda chain_id: ChainKeys(prefix, chain_id).record,
        ChainRecord,
        start=offset,
    )
    rows: list[ChainStatus] = []
    for chain_id, record in found:
        if record.state is ChainState.RUNNING:
            rows.append(await chain_status(fanin, chain_id))
        else:
            rows.append(status_from_record(chain_id, record, read_at=now))
    total, due = await _counts(ctx, chain_index_key(prefix), now)
    return Listing(rows, total, due, offset, limit)


async def finished_since(
    fanin: FanInMiddleware, seen: Seen, open_ids: set[str]
) -> tuple[list[GroupStatus], list[ChainStatus]]:
    """Of the ids seen open and not on this page: those over now, newest first.

    Those gone from Redis (expired) are forgotten; those still open are kept.
    """
    groups: list[GroupStatus] = []
    for group_id in [g for g in reversed(seen.groups) if g not in open_ids]:
        found = await group_status(fanin, group_id)
        if found.state is GroupState.MISSING:
            del seen.groups[group_id]
        elif found.state in GROUP_OVER:
            groups.append(found)
    chains: list[ChainStatus] = []
    for chain_id in [c for c in reversed(seen.chains) if c not in open_ids]:
        chain = await chain_status(fanin, chain_id)
        if chain.state is ChainState.MISSING:
            del seen.chains[chain_id]
        elif chain.finished is not None:
            chains.append(chain)
    return groups, chains


def _decoded(raw: object) -> Any:
    if raw is None:
        return None
    try:
        return json.loads(text(raw))
    except ValueError:
        return text(raw)


def _error(raw: object) -> MemberError:
    if not raw:
        return MemberError(type="UnknownError", message="")
    return MemberError.model_validate_json(text(raw))


async def members(
    fanin: FanInMiddleware, group_id: str, offset: int, limit: int, total: int
) -> list[Member]:
    """Members ``offset .. offset + limit - 1`` (within ``total``) in order.

    One round trip of four commands of ``limit`` fields each, whatever the
    group's size.
    """
    ctx = context_of(fanin)
    keys = GroupKeys(ctx.config.prefix, group_id)
    indexes = list(range(offset, min(offset + limit, total)))
    if not indexes:
        return []
    skip_fields = [f"{SKIP_FIELD}{index}" for index in indexes]
    async with ctx.redis.pipeline(transaction=False) as pipe:
        pipe.smismember(keys.done, indexes)
        pipe.smismember(keys.failed, indexes)
        pipe.hmget(keys.results, indexes)
        pipe.hmget(keys.errors, indexes)
        pipe.hmget(keys.errors, skip_fields)
        done, failed, results, errors, skips = await pipe.execute()
    page = []
    for i, index in enumerate(indexes):
        if skips[i] is not None:
            reason = _decoded(skips[i])
            page.append(Member(index, "skipped", error=_skip(reason)))
        elif done[i]:
            page.append(Member(index, "done", result=_decoded(results[i])))
        elif failed[i]:
            page.append(Member(index, "failed", error=_error(errors[i])))
        else:
            page.append(Member(index, "pending"))
    return page


def _skip(reason: object) -> MemberError:
    return MemberError(type="Skip", message="" if reason is None else str(reason))


async def failures(
    fanin: FanInMiddleware, group_id: str, cursor: int, limit: int
) -> tuple[list[Member], int]:
    """Some failed members with their errors, and the cursor to go on (0: done).

    ``SSCAN`` of the failed set, ``limit`` a step: bounded work per page, in
    the set's own order (sorted within the page).
    """
    ctx = context_of(fanin)
    keys = GroupKeys(ctx.config.prefix, group_id)
    next_cursor, raw = await ctx.redis.sscan(keys.failed, cursor, count=limit)
    indexes = sorted(int(text(item)) for item in raw)
    if not indexes:
        return [], int(next_cursor)
    errors = await ctx.redis.hmget(keys.errors, indexes)
    found = [
        Member(index, "failed", error=_error(raw_error))
        for index, raw_error in zip(indexes, errors, strict=True)
    ]
    return found, int(next_cursor)


async def compensations(fanin: FanInMiddleware, chain_id: str) -> list[str]:
    """The task names of the chain's compensations so far, in step order."""
    ctx = context_of(fanin)
    keys = ChainKeys(ctx.config.prefix, chain_id)
    raw = await ctx.redis.lrange(keys.compensations, 0, COMPENSATIONS_SHOWN - 1)
    names = []
    for entry in raw:
        try:
            names.append(Signature.from_ledger(entry).task_name)
        except ValueError:
            names.append("(unreadable)")
    return names


async def outcomes(
    fanin: FanInMiddleware, group_id: str, after: str | None, limit: int
) -> list[MemberOutcome]:
    """At most ``limit`` outcomes as recorded, after the cursor ``after``.

    One ``XRANGE`` of the group's outcome stream: never waits, never whole.
    """
    ctx = context_of(fanin)
    key = group_keys(ctx.config.prefix, group_id).outcomes
    cursor = outcome_stream.checked_cursor(after)
    page = await outcome_stream.read_after(ctx.redis, key, cursor, count=limit)
    return [member_outcome(entry) for entry in page]
