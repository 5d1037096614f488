"""The sweep's indexes: group (or chain) ids scored by when to look at them next.

Scores are on Redis's clock (a one-key script reads it). An index may be stale
(the sweep trusts each group's own keys and prunes it), but it must never miss a
group whose ledger exists: planning writes the entry first.
"""

from taskiq_fanin.context import FanInContext
from taskiq_fanin.store.keys import chain_index_key, index_key


def _key(ctx: FanInContext, chains: bool) -> str:
    prefix = ctx.config.prefix
    return chain_index_key(prefix) if chains else index_key(prefix)


async def add(
    ctx: FanInContext, item_id: str, after_ms: int, *, chains: bool = False
) -> bool:
    """Index a new group (or chain), due ``after_ms`` from now; False if it was."""
    key = _key(ctx, chains)
    return await ctx.scripts.schedule(key, item_id, after_ms=after_ms, mode="nx")


async def rescore(ctx: FanInContext, group_id: str, after_ms: int) -> None:
    """Look at an indexed group again ``after_ms`` from now; never puts one back."""
    key = _key(ctx, False)
    await ctx.scripts.schedule(key, group_id, after_ms=after_ms, mode="xx")


async def reschedule(
    ctx: FanInContext, item_id: str, after_ms: int, *, chains: bool = False
) -> None:
    """Look at an item again ``after_ms`` from now (the sweep, having judged it)."""
    key = _key(ctx, chains)
    await ctx.scripts.schedule(key, item_id, after_ms=after_ms, mode="set")


async def look_sooner(
    ctx: FanInContext, item_id: str, after_ms: int, *, chains: bool = False
) -> None:
    """Look at an item ``after_ms`` from now, if it was due later than that."""
    key = _key(ctx, chains)
    await ctx.scripts.schedule(key, item_id, after_ms=after_ms, mode="sooner")


async def remove(ctx: FanInContext, item_id: str, *, chains: bool = False) -> None:
    """The group (or chain) needs no more sweeping."""
    key = _key(ctx, chains)
    await ctx.scripts.send(lambda pipe: pipe.zrem(key, item_id))


async def due(
    ctx: FanInContext, batch: int, *, chains: bool = False
) -> tuple[int, list[str]]:
    """Redis's now (epoch ms), and up to ``batch`` ids whose time has come."""
    return await ctx.scripts.due(_key(ctx, chains), batch=batch)
