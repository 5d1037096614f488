"""A caller's ``kiq()`` retried: what a retry cannot write again, and what is not Redis.

A streamed group's iterator is read once (``ledger.Replay`` holds its first
chunk and the one in flight): a retry that finds the group gone from Redis (a
restart without persistence, a failover that lost it) cannot write the chunks
let go, and says so rather than plan a ledger with holes. A listed group's
retry writes its whole ledger again. An error of the caller's own iterator is
the caller's, never taken for Redis away. On fakeredis.
"""

from collections.abc import AsyncIterator
from typing import Any

import fakeredis
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from taskiq_fanin import FanInMiddleware, GroupResult, Signature, group
from taskiq_fanin.api.broker import context_of
from taskiq_fanin.errors import FanInError, GroupLostError, MemberNotSerializableError
from taskiq_fanin.groups import ledger
from tests.fake_brokers import Kicks, settled

Rig = tuple[Kicks, fakeredis.FakeAsyncRedis, dict[str, Any]]


@pytest.fixture
async def rig(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Rig]:
    monkeypatch.setattr(ledger, "CHUNK_MEMBERS", 2)
    client = fakeredis.FakeAsyncRedis()
    fanin = FanInMiddleware(client, prefix="rp", retry_for=0.5)
    broker = Kicks().with_middlewares(fanin)
    seen: dict[str, Any] = {"members": [], "then": [], "read": []}

    @broker.task(task_name="member")
    async def member(index: Any) -> Any:
        seen["members"].append(index)
        return index

    @broker.task(task_name="then")
    async def then(result: GroupResult) -> None:
        seen["then"].append(len(result.succeeded))

    seen["tasks"] = (member, then)
    await broker.startup()
    try:
        yield broker, client, seen
    finally:
        await broker.shutdown()
        await client.flushall()
        await client.aclose()


def lose_group_at(broker: Kicks, client: Any, first: int) -> list[int]:
    """The ``appendLedger`` of the chunk at ``first`` wipes Redis, then fails."""
    scripts = context_of(broker).scripts
    append = scripts.append_ledger
    fired: list[int] = []

    async def flaky(keys: Any, **kwargs: Any) -> Any:
        if kwargs["first"] == first and not fired:
            fired.append(first)
            await client.flushall()  # restarted without persistence
            raise RedisConnectionError("Redis restarted")
        return await append(keys, **kwargs)

    scripts.append_ledger = flaky  # type: ignore[method-assign]
    return fired


async def test_a_streamed_group_lost_mid_plan_raises_and_kicks_nothing(
    rig: Rig,
) -> None:
    """Chunks 1 and 2 were written, then let go: the retry, creating the group
    again, cannot write them; it takes the group back and raises."""
    broker, client, seen = rig
    member, then = seen["tasks"]
    fired = lose_group_at(broker, client, 6)

    async def members() -> Any:
        for i in range(7):
            seen["read"].append(i)
            yield Signature.of(member, i)

    with pytest.raises(GroupLostError) as raised:
        await group(members(), then=then, group_id="holes").kiq(broker)
    await settled(broker)

    assert fired == [6]
    assert not isinstance(raised.value, RedisConnectionError)
    assert seen["read"] == list(range(7))  # read once
    assert broker.kicked == []
    assert await client.exists("rp:{holes}:meta", "rp:{holes}:plan") == 0


async def test_a_listed_group_lost_mid_plan_is_written_whole_again(rig: Rig) -> None:
    broker, client, seen = rig
    member, then = seen["tasks"]
    fired = lose_group_at(broker, client, 4)
    members = [Signature.of(member, i) for i in range(7)]
    handle = await group(members, then=then, group_id="whole").kiq(broker)
    await settled(broker)

    assert fired == [4]
    assert handle.created is True
    assert sorted(seen["members"]) == list(range(7))
    assert seen["then"] == [7]


@pytest.mark.parametrize("at", [1, 5])
async def test_the_caller_s_iterator_raising_is_raised_once_and_plans_nothing(
    rig: Rig, at: int
) -> None:
    """A ``TimeoutError`` of the caller's own source is not Redis away: raised
    as is, at once (in the first chunk or a later one), nothing kicked."""
    broker, client, seen = rig
    member, then = seen["tasks"]
    calls: list[int] = []

    async def members() -> Any:
        calls.append(1)
        for i in range(7):
            if i == at:
                raise TimeoutError("the caller's own source timed out")
            yield Signature.of(member, i)

    with pytest.raises(TimeoutError, match="own source"):
        await group(members(), then=then, group_id="src").kiq(broker)
    await settled(broker)

    assert calls == [1]
    assert broker.kicked == []
    assert seen["then"] == []
    assert await client.exists("rp:{src}:meta", "rp:{src}:plan") == 0


async def test_a_bad_member_wins_over_a_cleanup_that_met_redis_away(
    rig: Rig,
) -> None:
    """The chunks before a bad member are taken back; Redis away then is
    retried, and the caller hears of the bad member, not of Redis."""
    broker, client, seen = rig
    member, then = seen["tasks"]
    scripts = context_of(broker).scripts
    abandon = scripts.abandon_group
    failed: list[int] = []

    async def flaky(keys: Any, **kwargs: Any) -> Any:
        if len(failed) < 2:
            failed.append(1)
            raise RedisConnectionError("Redis away")
        return await abandon(keys, **kwargs)

    scripts.abandon_group = flaky  # type: ignore[method-assign]

    async def members() -> Any:
        for i in range(4):
            yield Signature.of(member, i)
        yield Signature.of(member, object())  # not JSON

    with pytest.raises(MemberNotSerializableError):
        await group(members(), then=then, group_id="bad").kiq(broker)
    await settled(broker)

    assert failed == [1, 1]
    assert broker.kicked == []
    assert await client.exists("rp:{bad}:meta", "rp:{bad}:plan") == 0


async def test_a_bad_member_is_raised_when_redis_stays_away_for_its_cleanup(
    rig: Rig,
) -> None:
    broker, _, seen = rig
    member, then = seen["tasks"]
    scripts = context_of(broker).scripts

    async def away(keys: Any, **kwargs: Any) -> Any:
        raise RedisConnectionError("Redis away")

    scripts.abandon_group = away  # type: ignore[method-assign]

    async def members() -> Any:
        for i in range(4):
            yield Signature.of(member, i)
        yield Signature.of(member, object())

    with pytest.raises(FanInError) as raised:
        await group(members(), then=then, group_id="bad2").kiq(broker)

    assert isinstance(raised.value, MemberNotSerializableError)
    assert broker.kicked == []


async def test_chunks_that_end_unsealed_are_taken_back_not_dispatched(
    rig: Rig,
) -> None:
    """A source that stops before its last chunk (a bug, or a generator
    finished by an earlier error) never has a ledger kicked unsealed."""
    from taskiq_fanin.groups.group_validation import validate_group
    from taskiq_fanin.groups.planning import plan_group

    broker, client, seen = rig
    member, _ = seen["tasks"]
    ctx = context_of(broker)
    spec = group([Signature.of(member, i) for i in range(4)], group_id="cut")
    plan = validate_group(ctx, spec)

    async def cut() -> Any:
        async for chunk in ledger.chunks(ctx, plan):
            yield chunk
            return  # the first of two, not the last

    with pytest.raises(RuntimeError, match="unsealed"):
        await plan_group(ctx, plan, chunks=cut())

    assert broker.kicked == []
    assert await client.exists("rp:{cut}:meta", "rp:{cut}:plan") == 0
