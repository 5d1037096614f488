"""A real 3-node Redis Cluster: every script touches one slot (the group's hash
tag), so groups spread over the nodes still fan in.
"""

import asyncio

import pytest
from redis.asyncio import RedisCluster

from taskiq_fanin import GroupResult, Signature, group
from taskiq_fanin.inspection import group_status
from tests.harness import SentMessages, drained, eventually, stream_broker, worker

pytestmark = pytest.mark.cluster


async def test_groups_on_a_cluster_fan_in_once_each(
    redis_url: str, redis_cluster_url: str, key_prefix: str
) -> None:
    cluster = RedisCluster.from_url(redis_cluster_url)
    sent = SentMessages()
    broker, fanin = stream_broker(redis_url, key_prefix, sent, fanin_redis=cluster)
    finished: list[GroupResult] = []

    @broker.task
    async def member(index: int) -> int:
        return index * 2

    @broker.task
    async def then(result: GroupResult) -> None:
        finished.append(result)

    group_ids = [f"g{i}" for i in range(12)]
    try:
        async with worker(broker, max_async_tasks=10) as receiver:
            for group_id in group_ids:
                members = [Signature.of(member, i) for i in range(4)]
                await group(members, then=then, group_id=group_id).kiq(broker)
            await eventually(lambda: len(finished) == 12, what="12 continuations")
            await eventually(
                lambda: sent.executions_of(then.task_name) == 12,
                what="the continuations to complete",
            )
            states = {(await group_status(fanin, g)).state.value for g in group_ids}
            await drained(broker, receiver)
        slots = {
            cluster.keyslot(f"{key_prefix}:{{{group_id}}}:meta")
            for group_id in group_ids
        }
        nodes = {
            cluster.get_node_from_key(f"{key_prefix}:{{{group_id}}}:meta").name
            for group_id in group_ids
        }
    finally:
        await cluster.aclose()

    assert sorted(r.group_id for r in finished) == sorted(group_ids)
    assert all(r.results == [0, 2, 4, 6] for r in finished)
    assert states == {"completed"}
    assert len(slots) == 12
    assert len(nodes) > 1, "the groups should spread over several nodes"


async def test_many_callers_at_once_on_a_cluster_that_lost_its_scripts_all_succeed(
    redis_url: str, redis_cluster_url: str, key_prefix: str
) -> None:
    """A fresh Cluster, or a replica just promoted (scripts are not replicated),
    answers every first call NOSCRIPT: callers past the client's connections per
    node, all reloading at once, failed with ``MaxConnectionsError`` (40 groups
    and chains started together, before any fault)."""
    broker, fanin = stream_broker(
        redis_url,
        key_prefix,
        fanin_redis=redis_cluster_url,
        cluster=True,
        max_connections=4,
    )
    await broker.startup()
    try:
        client = fanin.context.redis
        await client.execute_command(
            "SCRIPT FLUSH", target_nodes=RedisCluster.PRIMARIES
        )
        index = f"{key_prefix}:index"
        replies = await asyncio.gather(
            *(
                fanin.context.scripts.schedule(
                    index, f"item-{n}", after_ms=1000, mode="nx"
                )
                for n in range(40)
            )
        )
    finally:
        await broker.shutdown()

    assert replies == [True] * 40
