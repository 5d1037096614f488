"""Kicks paced on brokers that cannot take many at once: taskiq-redis's Sentinel ones.

taskiq-redis's Sentinel brokers ask a sentinel where the primary is on every
kick, through one client per sentinel whose pool holds 100 connections, and
fail a kick whose sentinels are all busy (``MaxConnectionsError`` taken as
"sentinel down", then ``MasterNotFoundError``, then taskiq's ``SendTaskError``)
with no fault at all. Measured on loopback with three sentinels
(``RedisStreamSentinelBroker``, bursts of concurrent ``kick``): up to 200 in
flight all succeed, 300 fail 100, 1,280 fail 1,080; 16 in flight take about
3 ms a kick, 64 about 4 ms, 200 about 5 ms: more in flight is no faster.

So the library keeps at most :data:`SENTINEL_KICKS` of its own kicks in flight
on such a broker, in the whole process (every planner, finaliser and sweep
shares the limit): planning 20 groups at once no longer makes 1,280 kicks race
for 100 connections. Other brokers (the stream, list and cluster ones, whose
kicks the library pipelines) are not paced here: ``dispatch_concurrency``
bounds each planner.
"""

import asyncio
from typing import Any

from taskiq import AsyncBroker, BrokerMessage
from taskiq_redis.redis_sentinel_broker import BaseSentinelBroker

#: Kicks in flight at once on a Sentinel broker, per process (see above).
SENTINEL_KICKS = 16


def kick_limit(broker: AsyncBroker) -> int | None:
    """How many kicks ``broker`` takes at once, if it has a limit the library knows.

    For a Sentinel broker: :data:`SENTINEL_KICKS`, or half its sentinels'
    pool when that is smaller.
    """
    if not isinstance(broker, BaseSentinelBroker):
        return None
    pools = [
        getattr(getattr(client, "connection_pool", None), "max_connections", None)
        for client in getattr(broker.sentinel, "sentinels", ())
    ]
    sizes = [size for size in pools if isinstance(size, int) and size > 0]
    return max(1, min([SENTINEL_KICKS, *(size // 2 for size in sizes)]))


class PacedBroker:
    """Stands in for a broker in taskiq's kicker; at most ``limit`` kicks at once.

    Every other attribute is the broker's own.
    """

    def __init__(self, broker: AsyncBroker, limit: int) -> None:
        self._broker = broker
        self.limit = limit
        self._slots = asyncio.Semaphore(limit)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._broker, name)

    async def kick(self, message: BrokerMessage) -> None:
        """The broker's own kick, once fewer than ``limit`` are in flight."""
        async with self._slots:
            await self._broker.kick(message)


def paced(broker: AsyncBroker) -> AsyncBroker:
    """``broker``, paced if it cannot take many kicks at once."""
    limit = kick_limit(broker)
    if limit is None:
        return broker
    return PacedBroker(broker, limit)  # type: ignore[return-value]
