"""Windowed groups given up, cancelled or finished: what is left in Redis.

A given-up windowed group keeps nothing of its window once it is claimed (its
window hash goes as it does for a group whose members all ended), and every
key any scenario leaves has a TTL.
"""

import asyncio

from redis.asyncio import Redis

from taskiq_fanin import GroupResult, Signature, group, sweep
from taskiq_fanin.inspection import group_status
from taskiq_fanin.store.keys import GroupKeys
from tests.harness import drained, eventually, stream_broker, worker

SHORT = 0.3  # seconds: a deadline short enough to pass within a test


async def immortal_keys(client: Redis, prefix: str) -> list[str]:
    """The library's keys under ``prefix`` without a TTL (not the broker's stream)."""
    return [
        key.decode() if isinstance(key, bytes) else key
        async for key in client.scan_iter(match=f"{prefix}:*")
        if await client.pttl(key) == -1 and key != f"{prefix}:stream".encode()
    ]


async def test_a_windowed_group_given_up_keeps_no_window_once_it_ends(
    redis_url: str, redis_client: Redis, key_prefix: str
) -> None:
    """K=1, member 1 hangs: the sweep gives it up; its window goes with it."""
    broker, fanin = stream_broker(redis_url, key_prefix, sweep_policy="give_up")
    results: list[GroupResult] = []
    hang = asyncio.Event()
    ran: list[int] = []

    @broker.task
    async def member(index: int) -> int:
        ran.append(index)
        if index == 1:
            await hang.wait()
        return index

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result)

    keys = GroupKeys(key_prefix, "gave")
    members = [Signature.of(member, i) for i in range(5)]
    async with worker(broker, max_async_tasks=4) as receiver:
        await group(
            members, then=then, group_id="gave", max_in_flight=1, deadline=SHORT
        ).kiq(broker)
        await eventually(lambda: ran == [0, 1], what="member 1 to hang")
        windowed = await redis_client.exists(keys.window)
        await eventually(
            lambda: overdue(fanin, "gave"), what="the window to stall past its deadline"
        )
        report = await sweep(fanin)
        await eventually(lambda: len(results) == 1, what="the continuation")
        hang.set()  # member 1 ends after the give-up: it releases nothing
        await drained(broker, receiver)
        status = await group_status(fanin, "gave")

    assert windowed == 1
    assert [f.action.value for f in report.findings] == ["give_up"]
    assert ran == [0, 1]
    (result,) = results
    assert (result.results, sorted(result.lost)) == ([0], [1, 2, 3, 4])
    assert status.state.value == "completed"
    assert await redis_client.exists(keys.window) == 0
    assert await immortal_keys(redis_client, key_prefix) == []


async def overdue(fanin: object, group_id: str) -> bool:
    return (await group_status(fanin, group_id)).overdue()  # type: ignore[arg-type]
