"""The sweep's index of groups: group ids scored by when to look at them next.

Scores are on Redis's clock (a one-key script reads it). The index may be stale
(the sweep trusts each group's own keys and prunes it), but it must never miss a
group whose ledger exists: planning writes the entry first. Chains have an
index of their own (``chains/chain_index.py``).
"""

from taskiq_fanin.context import FanInContext
from taskiq_fanin.storage.keys import index_key


async def add(ctx: FanInContext, group_id: str, after_ms: int) -> bool:
    """Index a new group, due ``after_ms`` from now; False if it was."""
    key = index_key(ctx.config.prefix)
    return await ctx.scripts.schedule(key, group_id, after_ms=after_ms, mode="nx")


async def rescore(ctx: FanInContext, group_id: str, after_ms: int) -> None:
    """Look at an indexed group again ``after_ms`` from now; never puts one back.

    Sent at once: it goes beside a continuation's kick, and must not trail it
    by the turns a batch waits (a worker dying in the kick leaves it to the
    sweep at the lease's end).
    """
    key = index_key(ctx.config.prefix)
    await ctx.scripts.schedule(key, group_id, after_ms=after_ms, mode="xx", now=True)


async def reschedule(ctx: FanInContext, group_id: str, after_ms: int) -> None:
    """Look at a group again ``after_ms`` from now (the sweep, having judged it)."""
    key = index_key(ctx.config.prefix)
    await ctx.scripts.schedule(key, group_id, after_ms=after_ms, mode="set")


async def remove(ctx: FanInContext, group_id: str) -> None:
    """The group needs no more sweeping."""
    key = index_key(ctx.config.prefix)
    await ctx.scripts.send(lambda pipe: pipe.zrem(key, group_id), written=key)


async def due(ctx: FanInContext, batch: int) -> tuple[int, list[str]]:
    """Redis's now (epoch ms), and up to ``batch`` group ids whose time has come."""
    return await ctx.scripts.due(index_key(ctx.config.prefix), batch=batch)


async def size(ctx: FanInContext) -> int:
    """How many groups the index holds (``ZCARD``: O(1)), stale entries and all."""
    return int(await ctx.redis.zcard(index_key(ctx.config.prefix)))
