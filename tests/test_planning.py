"""Planning: the ledger is durable before the first kick, and planning a group id
twice fans out once. On fakeredis (real Lua) with taskiq's InMemoryBroker.
"""

from collections.abc import AsyncIterator
from typing import Any

import pytest
from fakeredis.aioredis import FakeRedis
from taskiq import (
    BrokerMessage,
    InMemoryBroker,
    TaskiqMessage,
    TaskiqMiddleware,
    TaskiqResult,
)

from taskiq_fanin import FanInMiddleware, Signature, group, group_task
from taskiq_fanin.errors import FanInError, GroupPlanConflictError
from taskiq_fanin.inspection import group_status
from taskiq_fanin.storage.keys import GroupKeys
from tests.harness import eventually


class Ended(TaskiqMiddleware):
    """Each delivery's end, in order: its task name and result."""

    def __init__(self) -> None:
        super().__init__()
        self.results: list[tuple[str, TaskiqResult[Any]]] = []

    def post_execute(self, message: TaskiqMessage, result: TaskiqResult[Any]) -> None:
        self.results.append((message.task_name, result))


class FlakyBroker(InMemoryBroker):
    """Its kick fails from the ``fail_from``-th member on: a planner dying mid-way."""

    def __init__(self, fail_from: int) -> None:
        super().__init__()
        self.fail_from = fail_from
        self.kicked: list[str] = []

    async def kick(self, message: BrokerMessage) -> None:
        if len(self.kicked) >= self.fail_from:
            raise ConnectionError("broker went away")
        self.kicked.append(message.task_id)


@pytest.fixture
async def fanin(fake_redis: FakeRedis) -> FanInMiddleware:
    # A kick that keeps failing is retried for retry_for, then raised.
    return FanInMiddleware(fake_redis, prefix="plan", retry_for=0.2)


async def started(broker: InMemoryBroker, fanin: FanInMiddleware) -> InMemoryBroker:
    broker.add_middlewares(fanin)
    await broker.startup()
    return broker


async def test_the_ledger_is_durable_before_the_first_kick(
    fanin: FanInMiddleware, fake_redis: FakeRedis
) -> None:
    broker = await started(FlakyBroker(fail_from=2), fanin)

    @broker.task
    async def member(index: int) -> None:
        return None

    members = [Signature.of(member, i) for i in range(5)]
    with pytest.raises(Exception, match="Cannot send task"):
        await group(members, group_id="half").kiq(broker)

    keys = GroupKeys("plan", "half")
    assert broker.kicked == ["half~0", "half~1"]
    assert await fake_redis.hlen(keys.plan) == 5  # the sweep can finish it
    assert await fake_redis.hget(keys.meta, "planned") == b"0"
    status = await group_status(fanin, "half")
    assert (status.total, status.pending, status.planned) == (5, 5, False)
    assert await fake_redis.zscore("plan:index", "half") is not None


async def test_planning_the_same_group_id_twice_fans_out_once(
    fanin: FanInMiddleware,
) -> None:
    broker = await started(FlakyBroker(fail_from=100), fanin)

    @broker.task
    async def member(index: int) -> None:
        return None

    members = [Signature.of(member, i) for i in range(3)]
    first = await group(members, group_id="once").kiq(broker)
    second = await group(members, group_id="once").kiq(broker)

    assert (first.created, second.created) == (True, False)
    assert broker.kicked == ["once~0", "once~1", "once~2"]
    assert (await second.status()).planned


async def test_planning_a_group_id_again_with_other_members_is_refused_unwritten(
    fanin: FanInMiddleware, fake_redis: FakeRedis
) -> None:
    broker = await started(FlakyBroker(fail_from=100), fanin)

    @broker.task
    async def member(index: int) -> None:
        return None

    await group([Signature.of(member, i) for i in range(3)], group_id="g").kiq(broker)
    keys = GroupKeys("plan", "g")
    meta, ledger = (
        await fake_redis.hgetall(keys.meta),
        await fake_redis.hgetall(keys.plan),
    )

    others = [
        [Signature.of(member, i) for i in (0, 1, 3)],  # one member changed
        [Signature.of(member, i) for i in range(4)],  # one more
        [Signature.of(member, i) for i in range(2)],  # one fewer
    ]
    for members in others:
        with pytest.raises(GroupPlanConflictError, match=r"'g' exists with other") as e:
            await group(members, group_id="g").kiq(broker)
        assert isinstance(e.value, FanInError)

    assert broker.kicked == ["g~0", "g~1", "g~2"]
    assert await fake_redis.hgetall(keys.meta) == meta
    assert await fake_redis.hgetall(keys.plan) == ledger
    # The same members again: the same group (a retried kiq()).
    again = await group([Signature.of(member, i) for i in range(3)], group_id="g").kiq(
        broker
    )
    assert again.created is False
    assert broker.kicked == ["g~0", "g~1", "g~2"]


async def test_a_streamed_group_planned_again_with_another_first_chunk_is_refused(
    fanin: FanInMiddleware, fake_redis: FakeRedis
) -> None:
    broker = await started(FlakyBroker(fail_from=100), fanin)

    @broker.task
    async def member(index: int) -> None:
        return None

    async def members(values: range) -> AsyncIterator[Signature]:
        for value in values:
            yield Signature.of(member, value)

    await group(members(range(3)), group_id="s").kiq(broker)
    await group(members(range(3)), group_id="s").kiq(broker)  # the same plan
    with pytest.raises(GroupPlanConflictError):
        await group(members(range(1, 4)), group_id="s").kiq(broker)

    assert broker.kicked == ["s~0", "s~1", "s~2"]
    assert await fake_redis.hlen(GroupKeys("plan", "s").plan) == 3


async def test_a_group_task_redelivered_plans_its_group_once(
    fake_redis: FakeRedis,
) -> None:
    fanin = FanInMiddleware(fake_redis, prefix="redelivered")
    broker = InMemoryBroker().with_middlewares(fanin)
    runs: list[int] = []

    @broker.task
    async def member(index: int) -> None:
        runs.append(index)

    @broker.task
    @group_task()
    async def fan_out() -> list[Signature]:
        return [Signature.of(member, i) for i in range(3)]

    await broker.startup()
    try:
        first = await fan_out.kicker().with_task_id("fan-1").kiq()
        again = await fan_out.kicker().with_task_id("fan-1").kiq()  # redelivery
        await broker.wait_all()
        group_ids = [
            (await first.wait_result()).return_value,
            (await again.wait_result()).return_value,
        ]
    finally:
        await broker.shutdown()

    assert group_ids == ["fan-1", "fan-1"]
    assert sorted(runs) == [0, 1, 2]


async def test_a_group_task_redelivered_with_other_members_keeps_its_first_plan(
    fake_redis: FakeRedis,
) -> None:
    """Its group's id is derived (the fan-out's task id): a redelivery whose body
    builds other members (a query whose answer moved) is the same fan-out,
    planned once, not refused."""
    fanin = FanInMiddleware(fake_redis, prefix="derived")
    ended = Ended()  # each delivery's end: both fan-outs share one task id
    broker = InMemoryBroker().with_middlewares(ended, fanin)
    runs: list[int] = []
    bodies: list[int] = []

    @broker.task
    async def member(index: int) -> None:
        runs.append(index)

    @broker.task
    @group_task()
    async def fan_out() -> list[Signature]:
        bodies.append(1)
        return [Signature.of(member, i + 10 * len(bodies)) for i in range(3)]

    await broker.startup()
    try:
        await fan_out.kicker().with_task_id("fan-2").kiq()
        await fan_out.kicker().with_task_id("fan-2").kiq()  # redelivery
        await broker.wait_all()
    finally:
        await broker.shutdown()

    fan_outs = [r for name, r in ended.results if name == fan_out.task_name]
    assert [(r.is_err, r.return_value) for r in fan_outs] == [(False, "fan-2")] * 2
    assert len(bodies) == 2
    assert sorted(runs) == [10, 11, 12]


async def test_planning_again_after_the_planner_died_dispatches_the_rest(
    fake_redis: FakeRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A planner that died outright (its lease not released) holds the group
    for its lease: another planner may not know it is dead before then."""
    fanin = FanInMiddleware(
        fake_redis, prefix="replan", finaliser_lease=0.5, retry_for=0.1
    )
    broker = await started(FlakyBroker(fail_from=2), fanin)

    async def died(*_: object, **__: object) -> bool:
        raise ConnectionError("the planner died before it could release")

    monkeypatch.setattr(fanin.context.scripts, "release_planner", died)

    @broker.task
    async def member(index: int) -> None:
        return None

    members = [Signature.of(member, i) for i in range(5)]
    with pytest.raises(Exception, match="Cannot send task"):
        await group(members, group_id="retry").kiq(broker)
    broker.fail_from = 100
    soon = await group(members, group_id="retry").kiq(broker)  # planner may live
    assert sorted(broker.kicked) == ["retry~0", "retry~1"]
    await eventually(
        lambda: _older_than_lease(fanin, "retry"), what="the planner's lease to end"
    )
    later = await group(members, group_id="retry").kiq(broker)

    assert (soon.created, later.created) == (False, False)
    # Every member without an outcome is kicked again (0 and 1 may be queued
    # still: a second delivery is harmless); the never-sent ones once.
    assert sorted(set(broker.kicked)) == [f"retry~{i}" for i in range(5)]
    assert [broker.kicked.count(f"retry~{i}") for i in (2, 3, 4)] == [1, 1, 1]
    assert (await later.status()).planned


async def test_planning_again_at_once_after_a_failed_dispatch_dispatches_the_rest(
    fake_redis: FakeRedis,
) -> None:
    """A planner whose kick failed releases its lease: planning the group again
    a moment later (a retry, another process) dispatches the rest at once,
    instead of waiting a finaliser_lease (60 s by default)."""
    fanin = FanInMiddleware(fake_redis, prefix="release", retry_for=0.2)
    broker = await started(FlakyBroker(fail_from=2), fanin)

    @broker.task
    async def member(index: int) -> None:
        return None

    members = [Signature.of(member, i) for i in range(5)]
    with pytest.raises(Exception, match="Cannot send task"):
        await group(members, group_id="again").kiq(broker)
    broker.fail_from = 100
    again = await group(members, group_id="again").kiq(broker)

    assert again.created is False
    assert sorted(set(broker.kicked)) == [f"again~{i}" for i in range(5)]
    assert [broker.kicked.count(f"again~{i}") for i in (2, 3, 4)] == [1, 1, 1]
    assert (await again.status()).planned


async def _older_than_lease(fanin: FanInMiddleware, group_id: str) -> bool:
    status = await group_status(fanin, group_id)
    return status.age_seconds() > fanin.config.finaliser_lease


async def test_an_empty_group_whose_create_reply_was_lost_still_continues_at_once(
    fanin: FanInMiddleware, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client retries a create whose reply was lost: the group exists, claimed
    by this planner, and the planner finalises it then, not the sweep a lease on."""
    broker = await started(FlakyBroker(fail_from=10), fanin)

    @broker.task
    async def then(result: object) -> None:
        return None

    scripts = fanin.context.scripts
    create_group = scripts.create_group

    async def reply_lost(*args: object, **kwargs: object) -> object:
        await create_group(*args, **kwargs)  # ran; its reply never came back
        return await create_group(*args, **kwargs)

    monkeypatch.setattr(scripts, "create_group", reply_lost)
    await group([], then=then, group_id="empty").kiq(broker)

    assert broker.kicked == ["empty~then"]
    assert (await group_status(fanin, "empty")).state.value == "dispatched"
