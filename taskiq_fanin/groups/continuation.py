"""The continuation's run guard and completion, and cancelling a group.

One copy of a continuation runs at a time and none after it completed
(invariant 3); once it has run, the group shrinks to a tombstone.
"""

import asyncio

from taskiq_fanin.context import FanInContext
from taskiq_fanin.domain.config import ms
from taskiq_fanin.domain.ids import member_task_id, redriven_member_id
from taskiq_fanin.domain.labels import ContinuationRef, MemberRef
from taskiq_fanin.domain.results import GroupState
from taskiq_fanin.domain.spec import ChainSpec
from taskiq_fanin.groups import group_index, ledger
from taskiq_fanin.groups.group_durations import group_ended
from taskiq_fanin.storage.keys import GroupKeys
from taskiq_fanin.storage.records import GroupMeta, read_fields
from taskiq_fanin.storage.replies import Begin


async def begin(
    ctx: FanInContext,
    ref: ContinuationRef,
    *,
    attempt: int,
    delivery: str,
    takes_over: bool = True,
) -> Begin:
    """Whether this delivery of a continuation may run its body (``RUN``).

    ``attempt`` counts the retry middleware's attempts: the next one takes a
    held lease over (unless the sweep's copy: ``takes_over``).
    The lease lasts ``finaliser_lease``; the same delivery asking again renews it.
    """
    keys = GroupKeys(ctx.config.prefix, ref.group_id)
    return await ctx.scripts.begin_continuation(
        keys,
        token=ref.token,
        attempt=attempt,
        delivery=delivery,
        lease_ms=ms(ctx.config.finaliser_lease),
        takes_over=takes_over,
    )


async def complete(ctx: FanInContext, ref: ContinuationRef) -> None:
    """The continuation ran to its end: shrink the group to its tombstone."""
    keys = GroupKeys(ctx.config.prefix, ref.group_id)
    # One pipeline, in this order: should the script fail, the group's keys
    # still expire with their TTL, and nothing is left to sweep.
    completed, _ = await asyncio.gather(
        ctx.scripts.mark_completed(
            keys, token=ref.token, tombstone_ms=ms(ctx.config.tombstone_ttl)
        ),
        group_index.remove(ctx, ref.group_id),
    )
    if completed:  # this call completed it: its duration, once
        await group_ended(ctx, ref.group_id)


async def release(
    ctx: FanInContext, ref: ContinuationRef, *, attempt: int, delivery: str
) -> None:
    """An attempt of the continuation ended without completing it: let a retry run.

    ``delivery``: the one the guard began it as; only its lease is released.
    """
    keys = GroupKeys(ctx.config.prefix, ref.group_id)
    await ctx.scripts.release_continuation(
        keys, token=ref.token, attempt=attempt, delivery=delivery
    )


async def complete_unrun(ctx: FanInContext, group_id: str) -> None:
    """Complete a group whose continuation will not run (its chain was cancelled)."""
    keys = GroupKeys(ctx.config.prefix, group_id)
    meta = await read_fields(ctx.redis, keys.meta, GroupMeta, "token")
    if meta.token:
        ref = ContinuationRef(group_id=group_id, token=meta.token, kind="then")
        await complete(ctx, ref)


async def cancel_group(ctx: FanInContext, group_id: str) -> bool:
    """Cancel an open group: no continuation runs. False if it is not open.

    The chains among its members that still run are cancelled too, whether
    the group was cancelled now or by a call that died half-way.
    """
    keys = GroupKeys(ctx.config.prefix, group_id)
    cancelled = await ctx.scripts.cancel_group(
        keys, tombstone_ms=ms(ctx.config.tombstone_ttl)
    )
    if cancelled:
        await group_index.remove(ctx, group_id)
        await group_ended(ctx, group_id)
    await _cancel_running_chains(ctx, keys)
    return cancelled


async def _cancel_running_chains(ctx: FanInContext, keys: GroupKeys) -> None:
    """Cancel the chains among a cancelled group's members with no outcome yet.

    Read from its ledger, kept a tombstone's time after the cancel; a member
    re-driven by the sweep may have started again under ``~r<n>``: each is asked.
    """
    meta = await read_fields(
        ctx.redis, keys.meta, GroupMeta, "state", "total", "redrives"
    )
    if meta.state is not GroupState.CANCELLED:
        return
    async for page in ledger.undispatched(ctx, keys, meta.total):
        chain_ids = [
            chain_id
            for index, member in page.items()
            if isinstance(member, ChainSpec)
            for chain_id in _chain_ids(keys.group_id, index, meta.redrives)
        ]
        await asyncio.gather(*(ctx.cancel_chain(ctx, c) for c in chain_ids))


def _chain_ids(group_id: str, index: int, redrives: int) -> list[str]:
    """Every id a member that is a chain may have run under."""
    first = member_task_id(group_id, index)
    return [first, *(redriven_member_id(first, n) for n in range(1, redrives + 1))]


async def is_cancelled(ctx: FanInContext, ref: MemberRef) -> bool:
    """True when the member's group has been cancelled (and is still this one)."""
    keys = GroupKeys(ctx.config.prefix, ref.group_id)
    meta = await read_fields(ctx.redis, keys.meta, GroupMeta, "token", "state")
    return meta.token == ref.token and meta.state is GroupState.CANCELLED
