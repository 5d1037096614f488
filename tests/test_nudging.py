"""The fault rig's ``nudging`` stops when its block ends, whatever its call does.

Under Python 3.10 and 3.11, ``asyncio.wait_for`` returns the result of a
future done at the moment its caller is cancelled, and the cancellation is
lost; redis-py 8 sends every command through it (the default
``socket_timeout``), so a cancelled command may return as if nothing happened
(a loop of ``xpending_range`` cancelled at random points went on 18 times in
60 here). A loop stopped by its cancel alone then runs for ever: a fault test
hung at its end until pytest's timeout. These tests stand a call that swallows
its cancellation in for redis-py's.
"""

import asyncio
from types import SimpleNamespace
from typing import Any, cast

from tests.fault_harness import Rig, nudging
from tests.harness import eventually


class SwallowingRedis:
    """``xpending_range`` waits until released; a cancel is swallowed as 3.11's does."""

    def __init__(self, *, swallow_every_cancel: bool = False) -> None:
        self.calls = 0
        self.waiting = False
        self.swallowed = 0
        self.release = asyncio.Event()
        self.swallow_every_cancel = swallow_every_cancel

    async def xpending_range(self, *args: Any, **kwargs: Any) -> list[Any]:
        self.calls += 1
        self.waiting = True
        try:
            while not self.release.is_set():
                try:
                    await self.release.wait()
                except asyncio.CancelledError:
                    self.swallowed += 1
                    if not self.swallow_every_cancel:
                        return []  # the reply was in: the cancellation is lost
        finally:
            self.waiting = False
        return []


def stub_rig(redis: SwallowingRedis) -> Rig:
    app = SimpleNamespace(STREAM="s", IDLE_TIMEOUT_MS=1, nudge=None)
    return cast(Rig, SimpleNamespace(redis=redis, app=app))


async def test_nudging_stops_though_its_call_swallowed_the_cancellation() -> None:
    redis = SwallowingRedis()

    async def block() -> None:
        async with nudging(stub_rig(redis), every=0.01):
            await eventually(lambda: redis.waiting, what="a call under way")

    ran = asyncio.create_task(block())
    done, _ = await asyncio.wait({ran}, timeout=10)
    redis.release.set()  # lets a loop that did not stop end (the test's own cleanup)
    assert done, "nudging's end hung: its loop went on past the swallowed cancel"
    ran.result()
    assert (redis.swallowed, redis.calls) == (1, 1)


async def test_a_cancellation_of_the_block_is_not_taken_for_the_loop() -> None:
    redis = SwallowingRedis(swallow_every_cancel=True)
    in_exit = asyncio.Event()

    async def block() -> None:
        async with nudging(stub_rig(redis), every=0.01):
            await eventually(lambda: redis.waiting, what="a call under way")
            in_exit.set()

    ran = asyncio.create_task(block())
    await asyncio.wait_for(in_exit.wait(), 10)
    await eventually(lambda: redis.swallowed >= 1, what="the loop's cancel")
    ran.cancel()  # while the exit waits for a loop that ignores its cancel
    done, _ = await asyncio.wait({ran}, timeout=10)
    redis.release.set()
    await eventually(lambda: not redis.waiting, what="the loop's call to end")
    assert done
    assert ran.cancelled()
