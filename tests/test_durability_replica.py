"""``durability="replicated"`` on a real primary and replica (loopback).

A group and a chain complete with real workers while the replica keeps up;
with the replica frozen (SIGSTOP), recording an outcome is retried, past
``retry_for`` the message stays unacknowledged and nothing it carried is acted
on; once the replica is back, the message comes back and the continuation and
the chain's last step run, each once (counted after draining). A caller's
``kiq()`` rides through a replica behind for a moment, and past ``retry_for``
raises ``NotReplicatedError`` having dispatched nothing.
"""

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from redis.asyncio import Redis
from taskiq_redis import RedisStreamBroker

from local_redis.server import RedisServer
from taskiq_fanin import FanInMiddleware, GroupResult, Signature, chain, group
from taskiq_fanin.errors import NotReplicatedError
from taskiq_fanin.storage.keys import GroupKeys
from tests.harness import drained, eventually, worker

pytestmark = pytest.mark.faults

#: How long a write waits for the replica, and how long the hooks retry (s).
WAIT_S, RETRY_FOR = 0.5, 2.0  # a loaded machine's replica acks in time


@pytest.fixture
def pair() -> Iterator[tuple[RedisServer, RedisServer]]:
    with (
        RedisServer() as primary,
        RedisServer(
            extra_args=["--replicaof", primary.host, str(primary.port)]
        ) as replica,
    ):
        yield primary, replica


async def replica_in_sync(primary: RedisServer) -> bool:
    """A write on the primary acknowledged by the replica: linked is not enough
    (a replica still loading its first sync is counted by a bare WAIT, yet
    acknowledges nothing: a planner's WAIT then timed out in CI)."""
    client = Redis.from_url(primary.url)
    try:
        async with client.pipeline(transaction=False) as pipe:
            pipe.set("durable:synced", 1, px=10_000)
            pipe.execute_command("WAIT", 1, 100)
            _, acknowledged = await pipe.execute()
        return int(acknowledged) >= 1
    finally:
        await client.aclose()


def rig(
    url: str, *, retry_for: float = RETRY_FOR
) -> tuple[RedisStreamBroker, FanInMiddleware, dict[str, Any]]:
    broker = RedisStreamBroker(
        url, queue_name="durable:stream", xread_block=100, idle_timeout=1000
    )
    fanin = FanInMiddleware(
        url,
        prefix="durable",
        durability="replicated",
        replication_timeout=WAIT_S,
        retry_for=retry_for,
    )
    broker.with_middlewares(fanin)
    go = asyncio.Event()
    seen: dict[str, Any] = {"then": [], "last": [], "members": 0, "go": go}

    @broker.task(task_name="member")
    async def member(index: int, hold: bool = False) -> int:
        seen["members"] += 1
        if hold:
            await go.wait()
        return index

    @broker.task(task_name="then")
    async def then(result: GroupResult) -> None:
        seen["then"].append(len(result.succeeded))

    @broker.task(task_name="step")
    async def step(value: int = 0) -> int:
        return value + 1

    @broker.task(task_name="last")
    async def last(value: int) -> None:
        seen["last"].append(value)

    @broker.task(task_name="noop")
    async def noop() -> None:
        """Kicked to make the stream broker read, and so reclaim what is idle."""

    seen["tasks"] = (member, then, step, last, noop)
    return broker, fanin, seen


async def pending(url: str) -> int:
    client = Redis.from_url(url)
    try:
        return int((await client.xpending("durable:stream", "taskiq"))["pending"])
    finally:
        await client.aclose()


async def test_a_group_and_a_chain_complete_with_a_replica(
    pair: tuple[RedisServer, RedisServer],
) -> None:
    primary, _ = pair
    await eventually(lambda: replica_in_sync(primary), what="the replica to sync")
    broker, _, seen = rig(primary.url)
    member, then, step, last, _ = seen["tasks"]
    async with worker(broker, max_async_tasks=10) as receiver:
        await group(
            [Signature.of(member, i) for i in range(20)], then=then, group_id="g"
        ).kiq(broker)
        await chain(
            Signature.of(step), Signature.of(step), Signature.of(last), chain_id="c"
        ).kiq(broker)
        await eventually(lambda: bool(seen["then"] and seen["last"]), what="both ends")
        await drained(broker, receiver)
    assert seen["then"] == [20]
    assert seen["last"] == [2]


async def test_an_outcome_the_replica_missed_is_not_done_until_it_is_back(
    pair: tuple[RedisServer, RedisServer],
) -> None:
    primary, replica = pair
    await eventually(lambda: replica_in_sync(primary), what="the replica to sync")
    broker, _, seen = rig(primary.url)
    member, then, _, _, noop = seen["tasks"]
    async with worker(broker, max_async_tasks=10) as receiver:
        await group(
            [Signature.of(member, i, True) for i in range(3)], then=then, group_id="h"
        ).kiq(broker)
        await eventually(lambda: seen["members"] == 3, what="members to run")
        replica.suspend()
        seen["go"].set()  # they end while the replica is away
        # Past retry_for the recording gives up: its message stays pending.
        await eventually(
            lambda: _pending_at_least(primary.url, 1),
            timeout=RETRY_FOR * 10,
            what="a member's message left unacknowledged",
        )
        assert seen["then"] == []  # nothing recorded is treated as done
        replica.resume()
        await eventually(lambda: replica_in_sync(primary), what="the replica back")

        async def completed() -> bool:
            await noop.kiq()  # the broker reclaims idle messages as it reads
            return 3 in seen["then"]

        await eventually(completed, timeout=30, what="h's continuation")
        await drained(broker, receiver)
    assert seen["then"] == [3]


async def _pending_at_least(url: str, least: int) -> bool:
    return await pending(url) >= least


async def test_a_caller_s_kiq_rides_through_a_replica_behind_for_a_moment(
    pair: tuple[RedisServer, RedisServer], caplog: pytest.LogCaptureFixture
) -> None:
    primary, replica = pair
    await eventually(lambda: replica_in_sync(primary), what="the replica to sync")
    broker, _, seen = rig(primary.url, retry_for=20.0)
    member, then, _, _, _ = seen["tasks"]
    async with worker(broker, max_async_tasks=10) as receiver:
        replica.suspend()
        try:
            planning = asyncio.create_task(
                group(
                    [Signature.of(member, i) for i in range(20)],
                    then=then,
                    group_id="behind",
                ).kiq(broker)
            )
            # A write of the plan the replica did not take in time: retried.
            await eventually(
                lambda: "Planning group behind: Redis is away" in caplog.text,
                what="the planner to retry",
            )
            assert not planning.done()
            assert seen["members"] == 0  # nothing kicked before it is replicated
        finally:
            replica.resume()
        handle = await planning
        await eventually(
            lambda: bool(seen["then"]), timeout=30, what="the continuation"
        )
        await drained(broker, receiver)
    assert handle.created is True
    assert seen["then"] == [20]
    assert seen["members"] == 20


async def test_past_retry_for_a_caller_s_kiq_raises_and_dispatches_nothing(
    pair: tuple[RedisServer, RedisServer],
) -> None:
    """Honestly: the plan is on the primary (unplanned; the sweep, or planning
    the same id again, dispatches it once the replica is back), not a member
    was kicked, and the caller heard ``NotReplicatedError``."""
    primary, replica = pair
    await eventually(lambda: replica_in_sync(primary), what="the replica to sync")
    broker, _, seen = rig(primary.url)
    member, then, _, _, _ = seen["tasks"]
    async with worker(broker, max_async_tasks=10):
        replica.suspend()
        try:
            with pytest.raises(NotReplicatedError):
                await group(
                    [Signature.of(member, i) for i in range(5)],
                    then=then,
                    group_id="never",
                ).kiq(broker)
        finally:
            replica.resume()
        client = Redis.from_url(primary.url)
        try:
            assert await client.xlen("durable:stream") == 0
            meta = GroupKeys("durable", "never").meta
            assert await client.hget(meta, "planned") == b"0"
        finally:
            await client.aclose()
    assert seen["members"] == 0
