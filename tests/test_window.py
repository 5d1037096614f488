"""Windowed fan-out on a real redis-server with real workers: ``max_in_flight``.

At most K members of a windowed group are queued or running at once, counted
by the members themselves (``tests/window_probe.py``), with duplicate
deliveries and retries injected; outcomes that come together release as many
members; a lost kick is re-driven by the sweep, never a member still waiting its
turn; the status says how many are in flight and how many wait.
"""

import asyncio
from typing import Any

import pytest
from redis.asyncio import Redis
from taskiq import SimpleRetryMiddleware

from taskiq_fanin import GroupResult, Signature, chain, group, sweep
from taskiq_fanin.api.broker import context_of
from taskiq_fanin.domain.exceptions import InvalidOptionError
from taskiq_fanin.domain.ids import member_task_id, step_id
from taskiq_fanin.groups import ledger
from taskiq_fanin.inspection import group_status
from taskiq_fanin.sweeping import SweepAction
from tests.harness import (
    DuplicatingMiddleware,
    SentMessages,
    drained,
    eventually,
    lossy_stream_broker,
    overdue,
    stream_broker,
    worker,
)
from tests.window_probe import Gate, InFlightProbe

MEMBER = "window.member"
#: Members that fail once (the retry middleware runs them again), and for good.
FAIL_ONCE, FAIL_ALWAYS = {3, 10, 17, 24, 31}, {6, 20}
SHORT = 0.3  # seconds: a deadline short enough to pass within a test


@pytest.mark.parametrize("most", [3, None], ids=["windowed", "unwindowed"])
async def test_a_windowed_group_never_runs_more_than_k_members_at_once(
    redis_url: str, redis_client: Redis, key_prefix: str, most: int | None
) -> None:
    """With copies and retries of members; unwindowed, the same count goes past K."""
    size, window = 40, 3
    probe = InFlightProbe(redis_client, key_prefix, "win")
    # Every fifth member (first window's and released ones alike) is sent twice.
    twice = DuplicatingMiddleware(
        lambda m: m.task_name == MEMBER and int(m.args[0]) % 5 == 0
    )
    sent = SentMessages()
    broker, _ = stream_broker(
        redis_url, key_prefix, twice, SimpleRetryMiddleware(default_retry_count=3), sent
    )
    results: list[GroupResult] = []
    attempts: dict[int, int] = {}
    # The first K members (K + 1 unwindowed) hold each other until all run.
    gate = Gate(range(window if most else window + 1))

    @broker.task(task_name=MEMBER, retry_on_error=True)
    async def member(index: int) -> int:
        async def body() -> int:
            attempts[index] = attempts.get(index, 0) + 1
            await gate.meet(index)
            await asyncio.sleep(0.01)  # the member's work: others start meanwhile
            if index in FAIL_ALWAYS or (index in FAIL_ONCE and attempts[index] == 1):
                raise RuntimeError(f"member {index} fails")
            return index

        return int(await probe.run(index, body))

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result)

    members = [Signature.of(member, i) for i in range(size)]
    async with worker(broker, max_async_tasks=10) as receiver:
        await group(members, then=then, group_id="win", max_in_flight=most).kiq(broker)
        await eventually(lambda: len(results) == 1, timeout=30, what="continuation")
        await drained(broker, receiver)

    highest = await probe.most()
    if most is None:
        assert highest > window  # the probe sees more when nothing holds them
        return
    assert highest == window
    assert await probe.members_ran() == set(range(size))
    assert twice.duplicated  # copies were sent, of released members too
    assert any(int(m.args[0]) >= window for m in twice.duplicated)
    # Retried once; a member also sent twice may run a third time (its copy
    # and its retry both begun before either recorded: at least once).
    assert {i: attempts[i] for i in FAIL_ONCE if i % 5} == {
        i: 2 for i in FAIL_ONCE if i % 5
    }
    assert all(attempts[i] >= 2 for i in FAIL_ONCE)
    assert sent.executions_of(then.task_name) == 1
    (result,) = results
    succeeded = [i for i in range(size) if i not in FAIL_ALWAYS]
    assert (result.succeeded, result.results) == (succeeded, succeeded)
    assert set(result.failed) == FAIL_ALWAYS


async def test_a_windowed_group_from_an_iterator_in_chunks_keeps_its_window(
    redis_url: str,
    redis_client: Redis,
    key_prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its planner reads the first window back from the sealed ledger."""
    monkeypatch.setattr(ledger, "CHUNK_MEMBERS", 20)
    size, window = 70, 4
    probe = InFlightProbe(redis_client, key_prefix, "streamed")
    broker, _ = stream_broker(redis_url, key_prefix)
    results: list[GroupResult] = []
    gate = Gate(range(window))  # the first window's members run together

    @broker.task
    async def member(index: int) -> int:
        return int(await probe.run(index, lambda: gate.work(index, 0.005, index)))

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result)

    members = (Signature.of(member, i) for i in range(size))
    async with worker(broker, max_async_tasks=10) as receiver:
        spec = group(members, then=then, group_id="streamed", max_in_flight=window)
        await spec.kiq(broker)
        await eventually(lambda: len(results) == 1, timeout=30, what="continuation")
        await drained(broker, receiver)

    assert await probe.most() == window
    assert await probe.members_ran() == set(range(size))
    assert results[0].results == list(range(size))


async def test_members_finishing_together_in_one_worker_release_as_many(
    redis_url: str, redis_client: Redis, key_prefix: str
) -> None:
    """Their outcomes share script calls; each one releases a member."""
    size, window = 24, 6
    probe = InFlightProbe(redis_client, key_prefix, "together")
    broker, fanin = stream_broker(redis_url, key_prefix)
    results: list[GroupResult] = []
    # A window's members wait for each other and end at the same moment: the
    # next round fills only if their outcomes, recorded together, released as
    # many members (else it waits for ever, and the test fails).
    full = asyncio.Condition()
    running: set[int] = set()
    rounds = [0]

    @broker.task
    async def member(index: int) -> int:
        async def body() -> int:
            async with full:
                mine = rounds[0]
                running.add(index)
                if len(running) == window:
                    running.clear()
                    rounds[0] += 1
                    full.notify_all()
                await full.wait_for(lambda: rounds[0] > mine)
            return index

        return int(await probe.run(index, body))

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result)

    members = [Signature.of(member, i) for i in range(size)]
    async with worker(broker, max_async_tasks=window) as receiver:
        stats = context_of(broker).outcomes.stats
        calls, recorded = stats.calls, stats.members
        await group(members, then=then, group_id="together", max_in_flight=window).kiq(
            broker
        )
        await eventually(lambda: len(results) == 1, timeout=30, what="continuation")
        await drained(broker, receiver)
        status = await group_status(fanin, "together")

    calls, recorded = stats.calls - calls, stats.members - recorded
    assert (recorded, rounds[0]) == (size, size // window)
    assert calls < size  # outcomes came together in calls ...
    assert await probe.most() == window  # ... and each released one member
    assert results[0].results == list(range(size))
    assert (status.state.value, status.in_flight, status.waiting) == (
        "completed",
        0,
        0,
    )


async def test_the_status_says_how_many_are_in_flight_and_how_many_wait(
    redis_url: str, key_prefix: str
) -> None:
    broker, fanin = stream_broker(redis_url, key_prefix)
    may_end: dict[int, asyncio.Event] = {i: asyncio.Event() for i in range(5)}
    started: list[int] = []

    @broker.task
    async def member(index: int) -> None:
        started.append(index)
        await may_end[index].wait()

    async def seen(in_flight: int, waiting: int, done: int) -> bool:
        status = await group_status(fanin, "held")
        return (status.in_flight, status.waiting, status.done) == (
            in_flight,
            waiting,
            done,
        )

    members = [Signature.of(member, i) for i in range(5)]
    async with worker(broker, max_async_tasks=10) as receiver:
        handle = await group(members, group_id="held", max_in_flight=2).kiq(broker)
        await eventually(lambda: len(started) == 2, what="the first window")
        first = await handle.status()
        may_end[0].set()
        await eventually(lambda: seen(2, 2, 1), what="one done, the next released")
        await eventually(lambda: len(started) == 3, what="the released member")
        for event in may_end.values():
            event.set()
        await eventually(lambda: seen(0, 0, 5), what="the group to complete")
        await drained(broker, receiver)

    assert (first.max_in_flight, first.in_flight, first.waiting) == (2, 2, 3)
    assert sorted(started[:2]) == [0, 1]
    assert sorted(started) == list(range(5))


async def test_a_window_that_keeps_moving_is_never_stuck_however_long_it_runs(
    redis_url: str, key_prefix: str
) -> None:
    """Members one at a time, the whole taking several deadlines: its deadline
    slides with each outcome, and the sweep finds nothing."""
    broker, fanin = stream_broker(redis_url, key_prefix)
    results: list[GroupResult] = []
    seen: list[tuple[bool, int]] = []  # (overdue, findings) while it runs

    @broker.task
    async def member(index: int) -> int:
        await asyncio.sleep(0.1)
        return index

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result)

    async def finished_while_on_time() -> bool:
        status = await group_status(fanin, "long")
        report = await sweep(fanin, dry_run=True)
        seen.append((status.overdue(), len(report.findings)))
        return bool(results)

    members = [Signature.of(member, i) for i in range(10)]
    async with worker(broker, max_async_tasks=4) as receiver:
        await group(
            members, then=then, group_id="long", max_in_flight=1, deadline=0.5
        ).kiq(broker)
        await eventually(finished_while_on_time, timeout=30, what="continuation")
        await drained(broker, receiver)

    assert len(seen) > 5  # looked at it all along its 1 s, two deadlines
    assert not any(overdue or findings for overdue, findings in seen)
    assert results[0].results == list(range(10))


async def test_a_lost_kick_of_a_released_member_is_redriven_by_the_sweep(
    redis_url: str, key_prefix: str
) -> None:
    """Only what the window released is missing: the waiting ones are not kicked."""
    sent = SentMessages()
    broker, fanin = lossy_stream_broker(
        redis_url, key_prefix, sent, sweep_policy="redrive"
    )
    results: list[GroupResult] = []

    @broker.task
    async def member(index: int) -> int:
        return index

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result)

    # Member 2's kick (released by the first outcome) is lost: one place of the
    # window of two stays empty, the other goes on to the end of the ledger.
    broker.drop = {member_task_id("stall", 2)}
    members = [Signature.of(member, i) for i in range(6)]
    async with worker(broker, max_async_tasks=4) as receiver:
        await group(
            members, then=then, group_id="stall", max_in_flight=2, deadline=SHORT
        ).kiq(broker)
        await eventually(
            lambda: recorded(fanin, "stall", 5), what="the window to go round member 2"
        )
        stalled = await group_status(fanin, "stall")
        await eventually(lambda: overdue(fanin, "stall"), what="the deadline")
        report = await sweep(fanin)
        await eventually(lambda: len(results) == 1, what="the continuation")
        await drained(broker, receiver)

    assert (stalled.in_flight, stalled.waiting, stalled.pending) == (1, 0, 1)
    (finding,) = report.findings
    assert (finding.action, finding.applied) == (SweepAction.REDRIVE, True)
    assert (finding.missing, finding.missing_count) == ([2], 1)
    kicked = [m.args[0] for m in sent.of_task(member.task_name)]
    assert sorted(kicked) == [0, 1, 2, 2, 3, 4, 5]  # 2 lost once, then re-driven
    assert results[0].results == list(range(6))


async def test_a_waiting_member_is_never_redriven(
    redis_url: str, key_prefix: str
) -> None:
    """The first window's kicks are lost: the sweep kicks those, not the rest."""
    sent = SentMessages()
    broker, fanin = lossy_stream_broker(
        redis_url, key_prefix, sent, sweep_policy="redrive"
    )
    results: list[GroupResult] = []

    @broker.task
    async def member(index: int) -> int:
        return index

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result)

    broker.drop = {member_task_id("lost", i) for i in range(3)}
    members = [Signature.of(member, i) for i in range(10)]
    await broker.startup()
    try:
        await group(
            members, then=then, group_id="lost", max_in_flight=3, deadline=SHORT
        ).kiq(broker)
        await eventually(lambda: overdue(fanin, "lost"), what="the deadline")
        before = len(sent.sent)
        report = await sweep(fanin)
        redriven = sorted(m.args[0] for m in sent.sent[before:])
    finally:
        await broker.shutdown()
    async with worker(broker, max_async_tasks=10) as receiver:
        await eventually(lambda: len(results) == 1, what="the continuation")
        await drained(broker, receiver)

    (finding,) = report.findings
    assert (finding.missing, finding.missing_count) == ([0, 1, 2], 3)
    assert redriven == [0, 1, 2]
    assert sent.executions_of(member.task_name) == 10
    assert results[0].results == list(range(10))


async def test_a_chain_step_group_keeps_its_window(
    redis_url: str, redis_client: Redis, key_prefix: str
) -> None:
    # The step's group id is the chain's step id (the chain's id, derived).
    probe = InFlightProbe(redis_client, key_prefix, step_id("windowed", 1))
    broker, _ = stream_broker(redis_url, key_prefix)
    ends: list[Any] = []
    gate = Gate(range(2))  # the step's first window runs together

    @broker.task
    async def first() -> int:
        return 10

    @broker.task
    async def member(previous: int, index: int) -> int:
        return int(
            await probe.run(index, lambda: gate.work(index, 0.01, previous + index))
        )

    @broker.task
    async def last(results: GroupResult) -> None:
        ends.append(results.results)

    step = group([Signature.of(member, i) for i in range(12)], max_in_flight=2)
    async with worker(broker, max_async_tasks=10) as receiver:
        await chain(
            Signature.of(first), step, Signature.of(last), chain_id="windowed"
        ).kiq(broker)
        await eventually(lambda: len(ends) == 1, timeout=30, what="the last step")
        await drained(broker, receiver)

    assert ends == [[10 + i for i in range(12)]]
    assert await probe.members_ran() == set(range(12))
    assert await probe.most() == 2


@pytest.mark.parametrize(
    ("most", "streamed"),
    [(3, False), (8, False), (8, True)],
    ids=["as-wide", "wider", "streamed"],
)
async def test_a_window_as_wide_as_a_listed_group_is_no_window_at_all(
    redis_url: str, key_prefix: str, most: int, streamed: bool
) -> None:
    """Listed, it is stored as none: the deadline stays where planning put it.

    From an iterator the group's size is known only once its ledger is written:
    its window stays, and its deadline slides with each outcome.
    """
    broker, fanin = stream_broker(redis_url, key_prefix)
    may_start, may_end = asyncio.Event(), asyncio.Event()

    @broker.task
    async def member(index: int) -> None:
        await may_start.wait()  # none ends before the planned status is read
        if index:
            await may_end.wait()
        else:
            await asyncio.sleep(0.01)  # its work: the clock moves on meanwhile

    listed = [Signature.of(member, i) for i in range(3)]
    members = iter(listed) if streamed else listed
    async with worker(broker, max_async_tasks=10) as receiver:
        await group(members, group_id="wide", max_in_flight=most).kiq(broker)
        planned = await group_status(fanin, "wide")
        may_start.set()
        await eventually(lambda: recorded(fanin, "wide", 1), what="member 0's outcome")
        one_done = await group_status(fanin, "wide")
        may_end.set()
        await eventually(lambda: recorded(fanin, "wide", 3), what="every outcome")
        await drained(broker, receiver)

    assert planned.deadline is not None
    assert one_done.deadline is not None
    if streamed:
        assert (planned.max_in_flight, one_done.max_in_flight) == (most, most)
        assert one_done.deadline > planned.deadline
    else:
        assert (planned.max_in_flight, one_done.max_in_flight) == (None, None)
        assert one_done.deadline == planned.deadline
    assert (planned.in_flight, planned.waiting) == (3, 0)


@pytest.mark.parametrize("bad", [0, -2, True, "3", 2.5])
async def test_a_bad_window_is_refused_before_anything_is_written(
    redis_url: str, redis_client: Redis, key_prefix: str, bad: Any
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix)

    @broker.task
    async def member(index: int) -> None:
        return None

    await broker.startup()
    try:
        with pytest.raises(InvalidOptionError, match="max_in_flight"):
            await group(
                [Signature.of(member, 1)], group_id="bad", max_in_flight=bad
            ).kiq(broker)
    finally:
        await broker.shutdown()
    assert await redis_client.keys(f"{key_prefix}:{{bad}}*") == []


async def recorded(fanin: Any, group_id: str, least: int) -> bool:
    status = await group_status(fanin, group_id)
    return status.done + status.failed >= least
