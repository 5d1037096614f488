"""Windowed groups to their end, on a real redis-server with real workers.

Given up (inline and by reference), cancelled, a cancelled chain's step, a
``@group_task`` that yields its members, a window of one under copies, retries
and ``NoResultError``: what runs, what the continuation reads, and what is left
in Redis (every key with a TTL; a given-up group's window hash gone with it).
A chain waiting on a windowed group step that keeps moving for many spans is
neither stuck nor expired under it; a group being given up is listed stuck.
"""

import asyncio
from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from taskiq import BrokerMessage, InMemoryBroker, SimpleRetryMiddleware
from taskiq.exceptions import NoResultError

from taskiq_fanin import (
    FanInMiddleware,
    GroupResult,
    Signature,
    cancel,
    chain,
    group,
    group_task,
    sweep,
)
from taskiq_fanin.chains.tasks import CONTINUE_TASK_NAME
from taskiq_fanin.domain.ids import step_id
from taskiq_fanin.domain.results import GroupState
from taskiq_fanin.inspection import chain_status, group_status, list_chains, list_groups
from taskiq_fanin.storage.keys import GroupKeys
from taskiq_fanin.sweep import giving_up
from tests.fake_brokers import MEMBER, MembersGoNowhere
from tests.harness import (
    DuplicatingMiddleware,
    SentMessages,
    drained,
    eventually,
    overdue,
    stream_broker,
    worker,
)
from tests.window_probe import InFlightProbe

SHORT = 0.3  # seconds: a deadline short enough to pass within a test


async def immortal_keys(client: Redis, prefix: str) -> list[str]:
    """The group and chain keys under ``prefix`` without a TTL: not the broker's
    stream, nor the sweep's two indexes (it prunes them: guarantees.md row 10)."""
    untimed = {f"{prefix}:{part}".encode() for part in ("stream", "index", "chains")}
    return [
        key.decode()
        async for key in client.scan_iter(match=f"{prefix}:*")
        if await client.pttl(key) == -1
        and key not in untimed
        and b":probe:" not in key  # the test's own (tests/window_probe.py)
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


async def test_a_windowed_group_given_up_by_reference_pages_what_arrived_and_lost(
    redis_url: str, redis_client: Redis, key_prefix: str
) -> None:
    """K=1 by reference: member 1 fails, member 2 hangs; the rest never ran."""
    broker, fanin = stream_broker(redis_url, key_prefix, sweep_policy="give_up")
    seen: list[tuple[list[object], list[int], list[int]]] = []
    hang = asyncio.Event()

    @broker.task
    async def member(index: int) -> int:
        if index == 1:
            raise RuntimeError("member 1 fails")
        if index == 2:
            await hang.wait()
        return index

    @broker.task
    async def then(result: GroupResult) -> None:
        seen.append(
            (
                [item async for item in result.iter_results(page_size=1)],
                [index async for index, _ in result.iter_failures(page_size=1)],
                [index async for index in result.iter_lost(page_size=2)],
            )
        )

    members = [Signature.of(member, i) for i in range(6)]
    async with worker(broker, max_async_tasks=4) as receiver:
        await group(
            members,
            then=then,
            group_id="ref",
            max_in_flight=1,
            deadline=SHORT,
            results_inline_max=2,
        ).kiq(broker)
        await eventually(
            lambda: overdue(fanin, "ref"), what="the window to stall past its deadline"
        )
        status = await group_status(fanin, "ref")
        await sweep(fanin)
        await eventually(lambda: len(seen) == 1, what="the continuation")
        hang.set()
        await drained(broker, receiver)
        after = await group_status(fanin, "ref")

    assert (status.in_flight, status.waiting) == (1, 3)
    assert seen == [([(0, 0)], [1], [2, 3, 4, 5])]
    assert (after.state.value, after.lost, after.in_flight) == ("completed", 4, 0)
    assert await immortal_keys(redis_client, key_prefix) == []


async def test_a_windowed_group_cancelled_mid_window_kicks_nothing_more(
    redis_url: str, redis_client: Redis, key_prefix: str
) -> None:
    broker, fanin = stream_broker(redis_url, key_prefix)
    hang = asyncio.Event()
    ran: list[int] = []

    @broker.task
    async def member(index: int) -> int:
        ran.append(index)
        await hang.wait()
        return index

    members = [Signature.of(member, i) for i in range(6)]
    async with worker(broker, max_async_tasks=4) as receiver:
        handle = await group(members, group_id="cut", max_in_flight=2).kiq(broker)
        await eventually(lambda: len(ran) == 2, what="the first window")
        assert await cancel(broker, "cut")
        hang.set()
        await eventually(
            lambda: recorded(fanin, "cut", 2), what="the running two to be counted"
        )
        await drained(broker, receiver)
        status = await handle.status()

    assert sorted(ran) == [0, 1]
    assert (status.state.value, status.done, status.in_flight) == ("cancelled", 2, 0)
    assert await redis_client.exists(GroupKeys(key_prefix, "cut").window) == 0
    assert await immortal_keys(redis_client, key_prefix) == []


async def test_a_cancelled_chain_stops_its_windowed_group_step(
    redis_url: str, redis_client: Redis, key_prefix: str
) -> None:
    broker, fanin = stream_broker(redis_url, key_prefix)
    hang = asyncio.Event()
    ran: list[int] = []
    ends: list[object] = []

    @broker.task
    async def first() -> int:
        return 1

    @broker.task
    async def member(previous: int, index: int) -> int:
        ran.append(index)
        await hang.wait()
        return index

    @broker.task
    async def last(result: GroupResult) -> None:
        ends.append(result)

    step = group([Signature.of(member, i) for i in range(5)], max_in_flight=1)
    async with worker(broker, max_async_tasks=4) as receiver:
        handle = await chain(
            Signature.of(first), step, Signature.of(last), chain_id="cc"
        ).kiq(broker)
        await eventually(lambda: ran == [0], what="the step's first member")
        assert await cancel(broker, handle.chain_id)
        hang.set()
        await drained(broker, receiver)
        status = await group_status(fanin, step_id("cc", 1))

    assert ran == [0]
    assert ends == []
    assert status.state.value == "cancelled"
    assert await immortal_keys(redis_client, key_prefix) == []


async def test_a_windowed_group_task_that_yields_its_members_keeps_its_window(
    redis_url: str, redis_client: Redis, key_prefix: str
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix)
    probe = InFlightProbe(redis_client, key_prefix, "gt")
    results: list[GroupResult] = []

    @broker.task
    async def member(index: int) -> int:
        if index == 3:
            raise NoResultError
        return int(await probe.run(index, lambda: asyncio.sleep(0.005, index)))

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result)

    @broker.task
    @group_task(then=then, max_in_flight=2)
    async def fan_out(size: int) -> AsyncIterator[Signature]:
        for i in range(size):  # an async generator body: it yields its members
            yield Signature.of(member, i)

    async with worker(broker, max_async_tasks=10) as receiver:
        await fan_out.kicker().with_task_id("gt").kiq(12)
        await eventually(lambda: len(results) == 1, timeout=10, what="continuation")
        await drained(broker, receiver)

    assert await probe.most() <= 2
    assert await probe.members_ran() == set(range(12)) - {3}
    assert results[0].succeeded == list(range(12))
    assert results[0].results[3] is None
    assert await immortal_keys(redis_client, key_prefix) == []


async def recorded(fanin: object, group_id: str, least: int) -> bool:
    status = await group_status(fanin, group_id)  # type: ignore[arg-type]
    return status.done + status.failed >= least


async def test_a_chain_outlives_its_windowed_group_step_however_long_it_slides(
    redis_url: str, redis_client: Redis, key_prefix: str
) -> None:
    """The step's window keeps its group alive past the ttl, and the sweep (run
    as users schedule it) keeps its chain as long."""
    broker, fanin = stream_broker(
        redis_url, key_prefix, ttl=1.5, deadline=0.5, finaliser_lease=0.5
    )

    async def ended_while_sweeping() -> bool:
        await sweep(fanin)
        return bool(ends)

    ends: list[object] = []

    @broker.task
    async def first() -> int:
        return 1

    @broker.task
    async def member(previous: int, index: int) -> int:
        await asyncio.sleep(0.25)
        return index

    @broker.task
    async def last(result: GroupResult) -> None:
        ends.append(result.results)

    step = group([Signature.of(member, i) for i in range(10)], max_in_flight=1)
    async with worker(broker, max_async_tasks=4) as receiver:
        handle = await chain(
            Signature.of(first), step, Signature.of(last), chain_id="long"
        ).kiq(broker)
        await eventually(ended_while_sweeping, timeout=15, what="the last step")
        await drained(broker, receiver)
        status = await handle.status()

    assert ends == [list(range(10))]
    assert status.state.value == "done"


async def test_a_chain_waiting_on_its_moving_windowed_group_step_is_never_stuck(
    redis_url: str, redis_client: Redis, key_prefix: str
) -> None:
    """The step's group runs for several deadlines, its window moving all along:
    the sweep (giving up what is stuck) finds neither it nor its chain stuck."""
    broker, fanin = stream_broker(
        redis_url, key_prefix, deadline=0.4, sweep_policy="give_up"
    )
    ends: list[object] = []
    findings: list[str] = []

    @broker.task
    async def first() -> int:
        return 1

    @broker.task
    async def member(previous: int, index: int) -> int:
        await asyncio.sleep(0.1)
        return index

    @broker.task
    async def last(result: GroupResult) -> None:
        ends.append(result.results)

    async def ended_while_sweeping() -> bool:
        report = await sweep(fanin)
        findings.extend(f"{f.group_id} {f.kind.value}" for f in report.findings)
        return bool(ends or findings)  # a finding fails the test at once

    step = group([Signature.of(member, i) for i in range(12)], max_in_flight=1)
    async with worker(broker, max_async_tasks=4) as receiver:
        handle = await chain(
            Signature.of(first), step, Signature.of(last), chain_id="slow"
        ).kiq(broker)
        await eventually(ended_while_sweeping, timeout=15, what="the last step")
        await drained(broker, receiver)
        status = await handle.status()

    assert findings == []
    assert ends == [list(range(12))]
    assert status.state.value == "done"


async def test_list_stuck_agrees_with_the_sweep_on_a_chain_waiting_on_a_moving_group(
    redis_url: str, key_prefix: str
) -> None:
    """Past the chain's own deadline, its windowed group step still on time:
    neither ``list_chains(stuck=True)`` nor ``overdue()`` calls it stuck, as
    the sweep does not (``docs/cli.md``: ``list --stuck`` agrees with
    ``sweep --fail-on-stuck``)."""
    deadline = 0.4
    broker, fanin = stream_broker(redis_url, key_prefix, deadline=deadline)
    ends: list[object] = []
    #: (sweep finds it stuck, listed stuck, overdue(), past its own deadline)
    seen: list[tuple[bool, bool, bool, bool]] = []

    @broker.task
    async def first() -> int:
        return 1

    @broker.task
    async def member(previous: int, index: int) -> int:
        await asyncio.sleep(0.1)
        return index

    @broker.task
    async def last(result: GroupResult) -> None:
        ends.append(result.results)

    async def looked_until_the_end() -> bool:
        report = await sweep(fanin, dry_run=True)
        swept = any(f.group_id == "agree" for f in report.stuck)
        listed = any(
            c.chain_id == "agree" for c in await list_chains(fanin, stuck=True)
        )
        status = await chain_status(fanin, "agree")
        assert status.updated is not None
        assert status.read_at is not None
        own = (status.read_at - status.updated).total_seconds() > deadline
        seen.append((swept, listed, status.overdue(), own and status.step == 1))
        return bool(ends)

    step = group([Signature.of(member, i) for i in range(12)], max_in_flight=1)
    async with worker(broker, max_async_tasks=4) as receiver:
        await chain(
            Signature.of(first), step, Signature.of(last), chain_id="agree"
        ).kiq(broker)
        await eventually(looked_until_the_end, timeout=15, what="the last step")
        await drained(broker, receiver)

    assert ends == [list(range(12))]
    assert any(own for *_, own in seen)  # looked at past the chain's own deadline
    assert [seen_as[:3] for seen_as in seen if any(seen_as[:3])] == []


class HoldsContinuations(InMemoryBroker):
    """Runs every message but a group step's continuation, which it holds."""

    def __init__(self) -> None:
        super().__init__()
        self.held: list[BrokerMessage] = []

    async def kick(self, message: BrokerMessage) -> None:
        if message.task_name == CONTINUE_TASK_NAME:
            self.held.append(message)
        else:
            await super().kick(message)


async def test_a_chain_whose_group_step_has_its_continuation_on_the_way_is_not_stuck(
    client: Redis, key_prefix: str
) -> None:
    """Past the chain's own deadline, its group step complete and dispatched
    (the continuation that moves the chain on queued, within the group's span):
    neither the sweep nor ``list --stuck`` calls the chain stuck; the group
    sweep would find that continuation overdue, by its own policy."""
    held = HoldsContinuations()
    held.add_middlewares(
        FanInMiddleware(client, prefix=key_prefix, deadline=0.2, sweep_policy="give_up")
    )

    @held.task
    async def first() -> int:
        return 1

    @held.task
    async def member(previous: int, index: int) -> int:
        return index

    await held.startup()
    try:
        step = group([Signature.of(member, i) for i in range(3)], deadline=60)
        await chain(Signature.of(first), step, chain_id="held").kiq(held)
        group_id = step_id("held", 1)

        async def dispatched_past_the_chains_deadline() -> bool:
            status = await chain_status(held, "held")
            assert status.updated is not None
            assert status.read_at is not None
            late = (status.read_at - status.updated).total_seconds() > 0.3
            dispatched = await group_status(held, group_id)
            return late and dispatched.state is GroupState.DISPATCHED

        await eventually(dispatched_past_the_chains_deadline, what="the chain late")
        report = await sweep(held, dry_run=True)
        listed = await list_chains(held, stuck=True)
        status = await chain_status(held, "held")
    finally:
        await held.shutdown()
    assert [f.kind.value for f in report.findings if f.group_id == "held"] == []
    assert listed == []
    assert not status.overdue()
    assert [m.task_name for m in held.held] == [CONTINUE_TASK_NAME]


async def test_a_window_of_one_holds_under_copies_retries_failures_and_no_result(
    redis_url: str, redis_client: Redis, key_prefix: str
) -> None:
    """Every member sent twice; some fail once (retried), some for good, some
    raise NoResultError: one member at a time, one continuation."""
    probe = InFlightProbe(redis_client, key_prefix, "one")
    twice = DuplicatingMiddleware(lambda m: m.task_name.endswith(":member"))
    sent = SentMessages()
    broker, _ = stream_broker(
        redis_url, key_prefix, twice, SimpleRetryMiddleware(default_retry_count=3), sent
    )
    results: list[GroupResult] = []
    attempts: dict[int, int] = {}

    @broker.task(retry_on_error=True)
    async def member(index: int) -> int:
        async def body() -> int:
            attempts[index] = attempts.get(index, 0) + 1
            await asyncio.sleep(0.005)
            if index == 4:
                raise RuntimeError("member 4 fails for good")
            if index == 2 and attempts[index] == 1:
                raise RuntimeError("member 2 fails once")
            if index == 6:
                raise NoResultError
            return index

        return int(await probe.run(index, body))

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result)

    members = [Signature.of(member, i) for i in range(8)]
    async with worker(broker, max_async_tasks=10) as receiver:
        await group(members, then=then, group_id="one", max_in_flight=1).kiq(broker)
        await eventually(lambda: len(results) == 1, timeout=30, what="continuation")
        await drained(broker, receiver)

    assert await probe.most() == 1
    assert len(twice.duplicated) >= 8
    assert sent.executions_of(then.task_name) == 1
    (result,) = results
    assert result.succeeded == [0, 1, 2, 3, 5, 6, 7]
    assert set(result.failed) == {4}
    assert await immortal_keys(redis_client, key_prefix) == []


async def test_a_group_being_given_up_over_visits_is_listed_stuck(
    redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between two visits of its give-up pass it is ``giving_up``, past its
    deadline: ``list_groups(stuck=True)`` (``taskiq-fanin list --stuck``) and
    ``overdue()`` say so, as they did while it was open."""
    monkeypatch.setattr(giving_up, "GIVE_UP_WINDOW", 2)
    monkeypatch.setattr(giving_up, "GIVE_UP_WINDOWS", 1)
    fanin = FanInMiddleware(redis_url, prefix=key_prefix)
    broker = MembersGoNowhere().with_middlewares(fanin)

    @broker.task(task_name=MEMBER)
    async def member(index: int) -> int:
        return index

    await broker.startup()
    try:
        handle = await group(
            [Signature.of(member, i) for i in range(6)],
            group_id="slowly",
            deadline=0.05,
            sweep_policy="give_up",
        ).kiq(broker)
        await eventually(lambda: overdue(fanin, "slowly"), what="the group's deadline")
        before = [s.group_id for s in await list_groups(fanin, stuck=True)]
        await sweep(fanin)  # the first of three visits
        status = await handle.status()
        stuck = [s.group_id for s in await list_groups(fanin, stuck=True)]
    finally:
        await broker.shutdown()

    assert before == ["slowly"]
    assert (status.state, status.lost) == (GroupState.GIVING_UP, 2)
    assert status.overdue()
    assert stuck == ["slowly"]
