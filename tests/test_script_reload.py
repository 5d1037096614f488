"""A script the server lost is loaded again, however the loads and losses interleave.

A caller that met ``NOSCRIPT`` joins the load under way (callers at the same
time share one); that load may have reached the server before the cache was
lost again (a replica promoted once more, a Cluster primary that took no part
in it): the caller's second ``NOSCRIPT`` starts a load of its own. The loads
under way are per event loop: one left pending on a closed loop blocks nobody.
"""

import asyncio
import contextlib
from typing import Any

from fakeredis import FakeAsyncRedis

from taskiq_fanin.transport.pipeline import PipelineBatcher, ScriptBatcher, reload


async def test_a_second_noscript_after_a_shared_load_loads_again(
    fake_redis: FakeAsyncRedis,
) -> None:
    script = fake_redis.register_script("return 7")
    call = ScriptBatcher(PipelineBatcher(fake_redis), script, writes=False)
    load = fake_redis.script_load
    loads: list[int] = []

    async def lost_again(source: str) -> Any:
        sha = await load(source)
        loads.append(1)
        if len(loads) == 1:
            await fake_redis.script_flush()  # lost again, after this load landed
        return sha

    fake_redis.script_load = lost_again  # type: ignore[method-assign]

    assert await call() == 7
    assert loads == [1, 1]


class _Script:
    """What ``reload`` uses of a redis-py script."""

    script = "return 1"

    def __init__(self, client: Any) -> None:
        self.registered_client = client


class _Client:
    def __init__(self, *, hangs: bool) -> None:
        self.hangs = hangs

    async def script_load(self, source: str) -> str:
        if self.hangs:
            await asyncio.Event().wait()
        return "sha"


def test_a_load_left_pending_on_a_closed_loop_blocks_no_later_caller() -> None:
    script = _Script(_Client(hangs=True))

    async def first() -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(reload(script), 0.05)  # type: ignore[arg-type]

    old = asyncio.new_event_loop()
    old.run_until_complete(first())
    old.close()  # its load still pending

    script.registered_client = _Client(hangs=False)
    asyncio.run(asyncio.wait_for(reload(script), 1))  # type: ignore[arg-type]
