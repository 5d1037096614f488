"""The sweep's index of groups that may need it: group id scored by when to look.

It may be stale (the sweep trusts each group's own keys and prunes it), but it
must never miss a group whose ledger exists.
"""

from taskiq_fanin.context import FanInContext
from taskiq_fanin.store.keys import index_key
from taskiq_fanin.store.scripts import text


async def add(ctx: FanInContext, group_id: str, at_ms: int) -> None:
    """Index a new group, due at ``at_ms``; an existing entry keeps its score."""
    key = index_key(ctx.config.prefix)
    await ctx.scripts.send(lambda pipe: pipe.zadd(key, {group_id: at_ms}, nx=True))


async def rescore(ctx: FanInContext, group_id: str, at_ms: int) -> None:
    """Look at an indexed group again at ``at_ms``; never puts back a removed one."""
    key = index_key(ctx.config.prefix)
    await ctx.scripts.send(lambda pipe: pipe.zadd(key, {group_id: at_ms}, xx=True))


async def reschedule(ctx: FanInContext, group_id: str, at_ms: int) -> None:
    """Look at a group again at ``at_ms`` (the sweep, about a group it judged)."""
    await ctx.redis.zadd(index_key(ctx.config.prefix), {group_id: at_ms})


async def remove(ctx: FanInContext, group_id: str) -> None:
    """The group needs no more sweeping."""
    key = index_key(ctx.config.prefix)
    await ctx.scripts.send(lambda pipe: pipe.zrem(key, group_id))


async def due(ctx: FanInContext, now_ms: int, batch: int) -> list[str]:
    """Up to ``batch`` group ids whose time has come, soonest first."""
    key = index_key(ctx.config.prefix)
    raw = await ctx.redis.zrangebyscore(key, "-inf", now_ms, start=0, num=batch)
    return [text(value) for value in raw]
