"""Members that count themselves: how many of a group's members without an
outcome run at once, as the members see it (for the windowed fan-out tests).

Each member, as it starts, adds its index to a set of running members (a count
per index, so copies of one member are one member) and notes, in the same
script, how many members in that set have no recorded outcome: a copy of a
member whose outcome is recorded already is not one of the group's members in
flight (taskiq delivers at least once; the window is over members, not copies).
That count only grows when a member starts, so its highest value is seen at a
start. Every key shares the group's hash tag: on a Redis Cluster too the script
touches one slot.
"""

import asyncio
import contextlib
from typing import Any, TypeVar

from redis.asyncio import Redis, RedisCluster

from taskiq_fanin.storage.keys import GroupKeys

T = TypeVar("T")

#: KEYS: counts, running set, highest, done, failed, ran; ARGV: the index.
_START = """
if redis.call('SISMEMBER', KEYS[4], ARGV[1]) == 1
    or redis.call('SISMEMBER', KEYS[5], ARGV[1]) == 1 then
  return 0
end
redis.call('SADD', KEYS[6], ARGV[1])
if redis.call('HINCRBY', KEYS[1], ARGV[1], 1) == 1 then
  redis.call('SADD', KEYS[2], ARGV[1])
end
local now = #redis.call('SDIFF', KEYS[2], KEYS[4], KEYS[5])
if now > tonumber(redis.call('GET', KEYS[3]) or 0) then
  redis.call('SET', KEYS[3], now)
end
return 1
"""
#: KEYS: counts, running set; ARGV: the index.
_END = """
if redis.call('HINCRBY', KEYS[1], ARGV[1], -1) <= 0 then
  redis.call('HDEL', KEYS[1], ARGV[1])
  redis.call('SREM', KEYS[2], ARGV[1])
end
"""


class InFlightProbe:
    """What the members of group ``group_id`` under ``prefix`` saw of each other."""

    def __init__(self, client: Redis | RedisCluster, prefix: str, group_id: str):
        self.client = client
        self.group = GroupKeys(prefix, group_id)
        tag = f"{prefix}:{{{group_id}}}:probe"
        self.counts, self.running = f"{tag}:counts", f"{tag}:running"
        self.highest, self.ran = f"{tag}:highest", f"{tag}:ran"
        self._start = client.register_script(_START)
        self._end = client.register_script(_END)

    async def started(self, index: int) -> bool:
        """Member ``index`` starts; False: its outcome is recorded (a late copy)."""
        keys = [self.counts, self.running, self.highest, self.group.done]
        keys += [self.group.failed, self.ran]
        return bool(await self._start(keys=keys, args=[index]))

    async def ended(self, index: int) -> None:
        """Member ``index`` (counted at its start) ends."""
        await self._end(keys=[self.counts, self.running], args=[index])

    async def most(self) -> int:
        """The most members without an outcome that ran at once."""
        return int(await self.client.get(self.highest) or 0)

    async def members_ran(self) -> set[int]:
        """Every member that started with no outcome recorded."""
        return {int(i) for i in await self.client.smembers(self.ran)}

    async def run(self, index: int, body: Any) -> Any:
        """Run ``body()`` as member ``index``, counted while it runs."""
        counted = await self.started(index)
        try:
            return await body()
        finally:
            if counted:
                await self.ended(index)


class Gate:
    """Members ``indices`` wait, bounded, until all of them have started.

    A window's members run at once only if the worker happens to take them
    together; members that hold each other make the most in flight a fact the
    test can assert rather than a race it usually wins. After ``timeout``
    seconds a member goes on regardless (the test's count then fails, it does
    not hang).
    """

    def __init__(self, indices: range | set[int], timeout: float = 10.0):
        self.indices, self.timeout = set(indices), timeout
        self._arrived: set[int] = set()
        self._all = asyncio.Event()

    async def meet(self, index: int) -> None:
        """Member ``index`` starts; a gated one waits for the others."""
        if index not in self.indices:
            return
        self._arrived.add(index)
        if self._arrived == self.indices:
            self._all.set()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._all.wait(), self.timeout)

    async def work(self, index: int, seconds: float, result: T) -> T:
        """Member ``index``'s work: meet the others, then ``seconds`` of it."""
        await self.meet(index)
        return await asyncio.sleep(seconds, result)
