"""Writing a group's ledger after its first chunk, or taking back what was written.

The planner (``groups/planning.py``) creates the group with its first chunk;
here the further chunks are appended, a dead planner's ledger sealed, and a
plan that cannot go on (a bad member, the caller's iterator raising, Redis
having lost the group) abandoned before anything was kicked (invariant 1).
"""

import logging
from collections.abc import AsyncGenerator

from redis.exceptions import RedisError

from taskiq_fanin.context import FanInContext
from taskiq_fanin.groups import index, ledger
from taskiq_fanin.model.errors import shown
from taskiq_fanin.model.planning_errors import GroupLostError
from taskiq_fanin.store.keys import GroupKeys
from taskiq_fanin.store.replies import Creation

logger = logging.getLogger("taskiq_fanin.planning")


async def take_over(
    ctx: FanInContext,
    keys: GroupKeys,
    made: Creation,
    *,
    own_token: str,
    first: ledger.Chunk,
    parts: AsyncGenerator[ledger.Chunk, None],
    retried: bool,
) -> int:
    """An earlier planner died mid-way: seal its ledger; the total it holds.

    The same planner again (its token) writes its chunks again, nothing
    changing twice; another only seals what the ledger holds.
    """
    token, written, total = made.token, False, 0
    if not made.sealed and token == own_token:
        written, total = await _write(ctx, keys, token, first)
    if written:
        _, total = await write_rest(
            ctx, keys, token, parts, total, sealed=first.last, retried=retried
        )
        return total
    await parts.aclose()
    _, total = await ctx.scripts.append_ledger(
        keys, token=token, first=0, members=(), seal=True
    )
    return total


async def _write(
    ctx: FanInContext, keys: GroupKeys, token: str, chunk: ledger.Chunk
) -> tuple[bool, int]:
    """Append one chunk; False: the ledger was sealed by another (taken over).

    With the ledger's total after the call.
    """
    return await ctx.scripts.append_ledger(
        keys, token=token, first=chunk.first, members=chunk.entries, seal=chunk.last
    )


async def write_rest(
    ctx: FanInContext,
    keys: GroupKeys,
    token: str,
    parts: AsyncGenerator[ledger.Chunk, None],
    total: int,
    *,
    sealed: bool,
    retried: bool,
) -> tuple[bool, int]:
    """Append every further chunk; False when the ledger was sealed meanwhile.

    Another planner (or the sweep) sealed it: what it holds is the group, and
    is kicked. An error of the members' source (a bad member, the caller's
    iterator raising), a ledger short of chunks written before (Redis lost the
    group) or a source ending before its last chunk (``sealed``: the first
    was) abandons the group, nothing kicked, and raises. ``total``: the
    ledger's so far; returned with the flag.
    """
    while True:
        try:
            chunk = await anext(parts)
        except StopAsyncIteration:
            break
        except Exception as error:  # noqa: BLE001  the source's (raised again)
            return await _abandon(ctx, keys, token, error, total=total, retried=retried)
        if total < chunk.first:  # chunks written before it are lost
            lost = GroupLostError(group_id=shown(keys.group_id))
            return await _abandon(ctx, keys, token, lost, total=total, retried=retried)
        written, total = await _write(ctx, keys, token, chunk)
        if not written:
            logger.warning(
                "Group %s: its ledger was sealed by another planner or the "
                "sweep; members after %d are not part of it",
                keys.group_id,
                chunk.first - 1,
            )
            return False, total
        sealed = chunk.last
    if not sealed:
        ended = RuntimeError(f"group {keys.group_id}: its chunks ended unsealed")
        return await _abandon(ctx, keys, token, ended, total=total, retried=retried)
    return True, total


async def _abandon(
    ctx: FanInContext,
    keys: GroupKeys,
    token: str,
    error: Exception,
    *,
    total: int,
    retried: bool,
) -> tuple[bool, int]:
    """Planning cannot go on: take back what was written (nothing was kicked), raise.

    Should the ledger have been sealed meanwhile by another planner or the
    sweep, the group runs as it holds (``total``): ``(False, total)``. Redis away
    while taking it back: raised for a planner that is ``retried`` (the retry
    meets ``error`` again and takes it back), else logged, and ``error`` wins.
    """
    try:
        if not await ctx.scripts.abandon_group(keys, token=token):
            logger.warning(
                "Group %s: its plan failed (%s) after its ledger was sealed by "
                "another planner or the sweep; the group runs as it holds it",
                keys.group_id,
                error,
            )
            return False, total
        await index.remove(ctx, keys.group_id)
    except (RedisError, OSError) as cleanup:
        if retried:
            raise
        logger.warning(
            "Group %s: its plan failed (%s); what it wrote was not taken back (%s)",
            keys.group_id,
            error,
            cleanup,
        )
    raise error
