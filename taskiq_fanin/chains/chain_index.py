"""The sweep's index of chains: chain ids scored by when to look at them next.

Scores are on Redis's clock (the ``scheduleSweep`` script reads it). It may be stale
(the sweep trusts each chain's record and prunes it), but it must never miss a
chain whose record exists: starting writes the entry first. The groups' index
is the group engine's own (``groups/group_index.py``).
"""

from taskiq_fanin.context import FanInContext
from taskiq_fanin.storage.keys import chain_index_key


async def add(ctx: FanInContext, chain_id: str, after_ms: int) -> bool:
    """Index a new chain, due ``after_ms`` from now; False if it was."""
    key = chain_index_key(ctx.config.prefix)
    return await ctx.scripts.schedule(key, chain_id, after_ms=after_ms, mode="nx")


async def reschedule(ctx: FanInContext, chain_id: str, after_ms: int) -> None:
    """Look at a chain again ``after_ms`` from now (having judged or moved it)."""
    key = chain_index_key(ctx.config.prefix)
    await ctx.scripts.schedule(key, chain_id, after_ms=after_ms, mode="set")


async def look_sooner(ctx: FanInContext, chain_id: str, after_ms: int) -> None:
    """Look at a chain ``after_ms`` from now, if it was due later than that."""
    key = chain_index_key(ctx.config.prefix)
    await ctx.scripts.schedule(key, chain_id, after_ms=after_ms, mode="sooner")


async def remove(ctx: FanInContext, chain_id: str) -> None:
    """The chain needs no more sweeping."""
    key = chain_index_key(ctx.config.prefix)
    await ctx.scripts.send(lambda pipe: pipe.zrem(key, chain_id), written=key)


async def due(ctx: FanInContext, batch: int) -> tuple[int, list[str]]:
    """Redis's now (epoch ms), and up to ``batch`` chain ids whose time has come."""
    return await ctx.scripts.due(chain_index_key(ctx.config.prefix), batch=batch)


async def size(ctx: FanInContext) -> int:
    """How many chains the index holds (``ZCARD``: O(1)), stale entries and all."""
    return int(await ctx.redis.zcard(chain_index_key(ctx.config.prefix)))
