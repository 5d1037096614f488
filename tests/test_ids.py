"""Ids on a real redis-server and real workers: a user's id never takes an id the
library derives, a group and a chain never share an id, and one id is looked up
the same way everywhere.
"""

import asyncio
from collections import Counter
from dataclasses import replace
from typing import Any

import pytest
from redis.asyncio import Redis
from taskiq import SimpleRetryMiddleware

from taskiq_fanin import (
    ChainFailure,
    ChainStatus,
    GroupResult,
    GroupStatus,
    Signature,
    cancel,
    chain,
    group,
    group_task,
    status,
)
from taskiq_fanin.api import group_task as group_task_module
from taskiq_fanin.api.control import Kind, resolve
from taskiq_fanin.domain.ids import (
    LONGEST_ID,
    chain_on_error_id,
    is_valid_id,
    member_task_id,
    redriven_member_id,
    step_id,
)
from taskiq_fanin.errors import (
    GroupPlanConflictError,
    IdInUseError,
    InvalidChainIdError,
    InvalidGroupError,
)
from taskiq_fanin.inspection import chain_status, group_status
from taskiq_fanin.models import ChainState, GroupState
from taskiq_fanin.storage.keys import ChainKeys, GroupKeys
from tests.harness import (
    DuplicatingMiddleware,
    SentMessages,
    drained,
    eventually,
    stream_broker,
    worker,
)


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

    async with worker(broker, max_async_tasks=4) as receiver:
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
        await drained(broker, receiver)

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


async def test_a_group_id_planned_again_with_other_members_is_refused_as_it_runs(
    redis_url: str, key_prefix: str
) -> None:
    """While the first plan's members run, and after its continuation ran (the
    tombstone): the other plan kicks nothing and writes nothing; the same one
    again is the same group."""
    sent = SentMessages()
    broker, fanin = stream_broker(redis_url, key_prefix, sent)
    results: list[list[str]] = []
    release = asyncio.Event()

    @broker.task
    async def member(name: str) -> str:
        await release.wait()  # running while the other plan comes
        return name

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result.results)

    def plan(*names: str) -> Any:
        members = [Signature.of(member, name) for name in names]
        return group(members, then=then, group_id="photos")

    keys = GroupKeys(key_prefix, "photos")
    async with worker(broker, max_async_tasks=2) as receiver:
        first = await plan("a", "b").kiq(broker)
        running = await fanin.context.redis.hgetall(keys.plan)
        assert len(running) == 2
        with pytest.raises(GroupPlanConflictError, match="another id"):
            await plan("a", "c").kiq(broker)
        assert await fanin.context.redis.hgetall(keys.plan) == running
        release.set()
        await eventually(lambda: results == [["a", "b"]], what="the continuation")
        await drained(broker, receiver)
        kicked = len(sent.sent)
        with pytest.raises(GroupPlanConflictError):
            await plan("c").kiq(broker)
        again = await plan("a", "b").kiq(broker)
        await drained(broker, receiver)

    assert (first.created, again.created) == (True, False)
    assert len(sent.sent) == kicked  # neither kicked a member
    assert results == [["a", "b"]]


async def _legacy_twin(redis: Redis, prefix: str, chain_id: str, to: str) -> None:
    """A group and a chain sharing ``to``, as ids written before the rule could."""
    await redis.rename(ChainKeys(prefix, chain_id).record, ChainKeys(prefix, to).record)


async def test_status_and_cancel_resolve_an_id_the_same_way(
    redis_url: str, key_prefix: str
) -> None:
    broker, fanin = stream_broker(redis_url, key_prefix)

    @broker.task
    async def member(name: str) -> str:
        return name

    redis = Redis.from_url(redis_url)
    try:
        await broker.startup()  # no worker: everything stays open
        await group([Signature.of(member, "g")], group_id="twin").kiq(broker)
        await chain(Signature.of(member, "c"), chain_id="other").kiq(broker)
        await _legacy_twin(redis, key_prefix, "other", "twin")
        await chain(Signature.of(member, "c"), chain_id="lone").kiq(broker)
        ctx = fanin.context

        assert await resolve(ctx, "twin") is Kind.GROUP  # a group first
        assert await resolve(ctx, "lone") is Kind.CHAIN
        assert await resolve(ctx, "nobody") is None
        assert isinstance(await status(broker, "twin"), GroupStatus)
        assert isinstance(await status(broker, "lone"), ChainStatus)

        assert await cancel(broker, "twin")  # the group, as status showed
        assert (await group_status(broker, "twin")).state is GroupState.CANCELLED
        assert (await chain_status(broker, "twin")).state is ChainState.RUNNING
        assert await cancel(broker, "lone")
        assert (await chain_status(broker, "lone")).state is ChainState.CANCELLED
        assert not await cancel(broker, "nobody")
    finally:
        await broker.shutdown()
        await redis.aclose()


async def test_a_handle_cancels_its_own_kind_even_on_a_shared_id(
    redis_url: str, key_prefix: str
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix)

    @broker.task
    async def member(name: str) -> str:
        return name

    redis = Redis.from_url(redis_url)
    try:
        await broker.startup()  # no worker: everything stays open
        group_handle = await group([Signature.of(member, "g")], group_id="twin").kiq(
            broker
        )
        other = await chain(Signature.of(member, "c"), chain_id="other").kiq(broker)
        await _legacy_twin(redis, key_prefix, "other", "twin")
        chain_handle = replace(other, chain_id="twin")

        assert await chain_handle.cancel()  # the chain, though a group comes first
        assert (await chain_handle.status()).state is ChainState.CANCELLED
        assert (await group_handle.status()).state is GroupState.OPEN
        assert not await chain_handle.cancel()  # once

        assert await group_handle.cancel()
        assert (await group_handle.status()).state is GroupState.CANCELLED
        assert not await group_handle.cancel()
    finally:
        await broker.shutdown()
        await redis.aclose()


@pytest.mark.parametrize(
    "call",
    [
        lambda broker, step: chain(step, chain_id="c{1}").kiq(broker),
        lambda broker, step: chain_status(broker, "c{1}"),
        lambda broker, step: cancel(broker, "c{1}"),
        lambda broker, step: status(broker, "c{1}"),
    ],
)
async def test_a_bad_chain_id_says_chain_id(
    redis_url: str, key_prefix: str, call: Any
) -> None:
    sent = SentMessages()
    broker, _ = stream_broker(redis_url, key_prefix, sent)

    @broker.task
    async def step() -> None: ...

    await broker.startup()
    try:
        with pytest.raises(InvalidChainIdError, match=r"chain id 'c\{1\}'"):
            await call(broker, Signature.of(step))
    finally:
        await broker.shutdown()
    assert sent.sent == []


@pytest.mark.parametrize("kind", ["group", "chain"])
async def test_a_callers_id_with_the_separator_is_refused(
    redis_url: str, key_prefix: str, kind: str
) -> None:
    sent = SentMessages()
    broker, _ = stream_broker(redis_url, key_prefix, sent)

    @broker.task
    async def step() -> None: ...

    await broker.startup()
    try:
        spec = (
            group([Signature.of(step)], group_id="vid~1")
            if kind == "group"
            else chain(Signature.of(step), chain_id="vid~1")
        )
        with pytest.raises(InvalidGroupError, match="'~' is reserved for ids the"):
            await spec.kiq(broker)
    finally:
        await broker.shutdown()
    assert sent.sent == []


def test_derived_ids_use_the_separator_and_stay_valid() -> None:
    member = member_task_id("vid.1", 3)
    assert member == "vid.1~3"
    assert not is_valid_id(member)
    assert is_valid_id(member, derived=True)
    assert step_id("vid", 1) != "vid.1"
    assert redriven_member_id(member, 2) == "vid.1~3~r2"
    longest = "x" * LONGEST_ID
    assert is_valid_id(step_id(longest, 999), derived=True)
    assert is_valid_id(redriven_member_id(member_task_id(longest, 7), 2), derived=True)
    # The one length: a lookup of a caller's id past it is refused, derived or not.
    assert not is_valid_id("x" * (LONGEST_ID + 1), derived=True)
    assert not is_valid_id(step_id("x" * (LONGEST_ID + 1), 1), derived=True)


async def test_a_group_task_member_delivered_twice_plans_its_group_once(
    redis_url: str, key_prefix: str
) -> None:
    """Its group id is its own task id, ``G~0``, derived by the library: both
    copies plan that group, and the second dispatches nothing.
    """
    twice = DuplicatingMiddleware(lambda m: m.task_name.endswith("fan_out"))
    sent = SentMessages()
    broker, _ = stream_broker(redis_url, key_prefix, twice, sent)

    @broker.task
    async def leaf(index: int) -> int:
        return index

    @broker.task
    @group_task
    def fan_out() -> list[Signature]:
        return [Signature.of(leaf, i) for i in range(3)]

    async with worker(broker, max_async_tasks=4) as receiver:
        await group([Signature.of(fan_out)], group_id="G").kiq(broker)
        await eventually(
            lambda: sent.executions_of(fan_out.task_name) == 2, what="the duplicate"
        )
        await drained(broker, receiver)
        planned = await group_status(broker, member_task_id("G", 0))

    ran = [m.task_id for m in sent.executed if m.task_name == fan_out.task_name]
    assert ran == [member_task_id("G", 0)] * 2
    assert planned.total == 3
    assert sent.executions_of(leaf.task_name) == 3


async def test_a_group_task_step_run_again_plans_its_group_once(
    redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chain step's copy runs again only once the first is over (the step guard):
    here its first attempt plans, then fails (a reply lost); the retry plans
    ``C~1`` again, and dispatches nothing.
    """
    sent = SentMessages()
    retry = SimpleRetryMiddleware(default_retry_count=2)
    broker, _ = stream_broker(redis_url, key_prefix, retry, sent)
    planned_ids: list[str] = []
    real_plan = group_task_module.plan_group

    async def plan_then_fail_once(ctx: Any, plan: Any) -> Any:
        planned = await real_plan(ctx, plan)
        planned_ids.append(planned.group_id)
        if len(planned_ids) == 1:
            raise ConnectionError("the reply was lost")
        return planned

    monkeypatch.setattr(group_task_module, "plan_group", plan_then_fail_once)

    @broker.task
    async def begin() -> int:
        return 0

    @broker.task
    async def leaf(index: int) -> int:
        return index

    @broker.task(retry_on_error=True)
    @group_task
    def fan_out(previous: int) -> list[Signature]:
        return [Signature.of(leaf, i) for i in range(3)]

    async with worker(broker, max_async_tasks=4) as receiver:
        handle = await chain(Signature.of(begin), Signature.of(fan_out)).kiq(broker)
        await eventually(lambda: len(planned_ids) == 2, what="the retry to plan")
        await drained(broker, receiver)
        planned = await group_status(broker, step_id(handle.chain_id, 1))

    assert planned_ids == [step_id(handle.chain_id, 1)] * 2
    assert planned.total == 3
    assert sent.executions_of(leaf.task_name) == 3


async def test_a_group_task_as_a_chains_on_error_delivered_twice_plans_once(
    redis_url: str, key_prefix: str
) -> None:
    """The chain's ``on_error`` has the derived task id ``C~on_error`` (the
    group it plans takes it); a copy delivered again once it ran is skipped by
    its run guard: the body plans nothing more.
    """
    sent = SentMessages()
    broker, _ = stream_broker(redis_url, key_prefix, sent)
    reports: list[ChainFailure] = []

    @broker.task
    async def fails() -> None:
        raise ValueError("boom")

    @broker.task
    async def leaf(index: int) -> int:
        return index

    @broker.task
    @group_task
    def report(failure: ChainFailure) -> list[Signature]:
        reports.append(failure)
        return [Signature.of(leaf, i) for i in range(3)]

    async with worker(broker, max_async_tasks=4) as receiver:
        handle = await chain(
            Signature.of(fails), chain_id="C", on_error=Signature.of(report)
        ).kiq(broker)
        await eventually(
            lambda: sent.executions_of(report.task_name) == 1, what="on_error"
        )
        (first,) = sent.of_task(report.task_name)
        await sent.resend(first)
        await eventually(
            lambda: sent.executions_of(report.task_name) == 2, what="the duplicate"
        )
        await drained(broker, receiver)
        planned = await group_status(broker, chain_on_error_id(handle.chain_id))

    assert len(reports) == 1
    assert planned.total == 3
    assert sent.executions_of(leaf.task_name) == 3


async def test_a_hand_set_task_id_cannot_take_a_derived_group_id(
    redis_url: str, key_prefix: str
) -> None:
    sent = SentMessages()
    broker, _ = stream_broker(redis_url, key_prefix, sent)

    @broker.task
    async def leaf() -> None: ...

    @broker.task
    @group_task
    def fan_out() -> list[Signature]:
        return [Signature.of(leaf)]

    async with worker(broker, max_async_tasks=2) as receiver:
        await fan_out.kicker().with_task_id(member_task_id("G", 0)).kiq()
        await eventually(lambda: sent.executions_of(leaf.task_name) == 1, what="leaf")
        (message,) = sent.of_task(leaf.task_name)
        taken = await group_status(broker, member_task_id("G", 0))
        await drained(broker, receiver)

    assert taken.state is GroupState.MISSING
    assert not message.task_id.startswith(member_task_id("G", 0))
