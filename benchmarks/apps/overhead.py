"""No-op children, kicked as one library group or as plain tasks.

The continuation can measure the group's keys at their peak: when it starts,
the ledger and the done set are full and nothing is deleted yet. That costs one
SCAN and a MEMORY USAGE per key, once per group, charged to the fan-in's time.
"""

from __future__ import annotations

from redis.asyncio import Redis
from redis.exceptions import ResponseError
from taskiq import AsyncBroker

from benchmarks.apps.common import App, AppSettings
from taskiq_fanin import GroupResult

#: SCAN page size when measuring the group's keys.
_SCAN_COUNT = 1000


async def group_memory(settings: AppSettings, group_id: str) -> tuple[int, int]:
    """Bytes (MEMORY USAGE of every element) and number of one group's keys.

    Every key of a group is ``<prefix>:{<group id>}:<part>``; the shared index of
    open groups (one entry per group) is left out.
    """
    client = Redis.from_url(settings.fanin_url)
    total = keys = 0
    pattern = f"{settings.fanin_prefix}:{{{group_id}}}:*"
    try:
        async for key in client.scan_iter(match=pattern, count=_SCAN_COUNT):
            total += await client.memory_usage(key, samples=0) or 0
            keys += 1
    finally:
        await client.aclose()
    return total, keys


def build(settings: AppSettings) -> App:
    """Register the no-op child and the continuation for ``settings``."""
    app = App(settings)

    @app.task("bench.overhead.noop")
    async def noop(index: int) -> None:
        return None

    @app.task("bench.overhead.then")
    async def then(result: GroupResult, measure: bool) -> None:
        if measure:
            try:
                total, keys = await group_memory(settings, result.group_id)
            except ResponseError:  # fakeredis has no MEMORY USAGE
                return
            await app.client.hset(
                settings.record("memory"),
                mapping={"bytes": total, "keys": keys, "members": result.total},
            )

    return app


def worker_broker() -> AsyncBroker:
    """Broker factory for ``taskiq worker`` (settings from the environment)."""
    return build(AppSettings.from_env()).broker
