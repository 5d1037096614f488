"""Ids on a real redis-server and real workers: a user's id never takes an id the
library derives, a group and a chain never share an id, and one id is looked up
the same way everywhere.
"""

from collections import Counter

import pytest
from redis.asyncio import Redis

from taskiq_fanin import (
    ChainState,
    GroupResult,
    GroupState,
    IdInUseError,
    Signature,
    chain,
    group,
    group_status,
)
from tests.harness import SentMessages, eventually, stream_broker, worker


async def test_a_dotted_group_id_does_not_take_a_chains_group_step(
    redis_url: str, key_prefix: str
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix)
    ran: Counter[str] = Counter()

    @broker.task
    async def member(name: str) -> str:
        ran[name] += 1
        return name

    @broker.task
    async def joined(result: GroupResult) -> None:
        ran["joined"] += 1

    @broker.task
    async def step(*values: object) -> str:
        ran["step"] += 1
        return "x"

    async with worker(broker, max_async_tasks=4):
        planned = await group(
            [Signature.of(member, "u1"), Signature.of(member, "u2")],
            then=Signature.of(joined),
            group_id="vid.1",
        ).kiq(broker)
        await eventually(lambda: ran["joined"] == 1, what="the user's group to end")
        handle = await chain(
            Signature.of(step),
            group([Signature.of(member, n).immutable() for n in ("a", "b")]),
            Signature.of(step),
            chain_id="vid",
        ).kiq(broker)

        async def chain_done() -> bool:
            return (await handle.status()).state is ChainState.DONE

        await eventually(chain_done, what="the chain 'vid' to end")
        user_group = await group_status(broker, planned.group_id)

    assert ran == Counter(u1=1, u2=1, joined=1, a=1, b=1, step=2)
    assert user_group.state is GroupState.COMPLETED


async def test_a_chain_cannot_take_a_groups_id_and_nothing_is_written(
    redis_url: str, key_prefix: str
) -> None:
    sent = SentMessages()
    broker, _ = stream_broker(redis_url, key_prefix, sent)

    @broker.task
    async def member(name: str) -> str:
        return name

    redis = Redis.from_url(redis_url)
    try:
        await broker.startup()
        await group([Signature.of(member, "g")], group_id="dup").kiq(broker)
        before = len(sent.sent)
        with pytest.raises(IdInUseError, match=r"'dup'.*group"):
            await chain(Signature.of(member, "c"), chain_id="dup").kiq(broker)
        assert len(sent.sent) == before  # no step kicked
        assert not await redis.exists(f"{key_prefix}:{{dup}}:chain")
        assert await redis.zscore(f"{key_prefix}:chains", "dup") is None
    finally:
        await broker.shutdown()
        await redis.aclose()


async def test_a_group_cannot_take_a_chains_id_and_nothing_is_written(
    redis_url: str, key_prefix: str
) -> None:
    sent = SentMessages()
    broker, _ = stream_broker(redis_url, key_prefix, sent)

    @broker.task
    async def member(name: str) -> str:
        return name

    redis = Redis.from_url(redis_url)
    try:
        await broker.startup()
        await chain(Signature.of(member, "c"), chain_id="dup").kiq(broker)
        before = len(sent.sent)
        with pytest.raises(IdInUseError, match=r"'dup'.*chain"):
            await group([Signature.of(member, "g")], group_id="dup").kiq(broker)
        assert len(sent.sent) == before  # no member kicked
        assert not await redis.exists(f"{key_prefix}:{{dup}}:meta")
        assert not await redis.exists(f"{key_prefix}:{{dup}}:plan")
        assert await redis.zscore(f"{key_prefix}:index", "dup") is None
    finally:
        await broker.shutdown()
        await redis.aclose()
