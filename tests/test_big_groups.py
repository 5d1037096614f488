"""Big groups plan in bounded steps, on a real redis-server with real workers.

The ledger is written in chunks (``createGroup``, then ``appendLedger``), every
chunk durable and the ledger sealed before the first kick; members may come from
an iterator or an async iterator, read a chunk at a time; no command the library
issues while planning 20,000 members runs 10 ms (``SLOWLOG``); a planner killed
between chunks leaves a group that planning again, or the sweep, finishes; and
the sweep re-drives a wide group a window per visit, its report bounded.
"""

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from redis.asyncio import Redis

from local_redis import RedisServer
from taskiq_fanin import GroupResult, Signature, chain, group, sweep
from taskiq_fanin.api.broker import context_of
from taskiq_fanin.domain.exceptions import (
    GroupTooWideError,
    InvalidChainError,
    InvalidGroupError,
    MemberTooLargeError,
)
from taskiq_fanin.domain.ids import member_task_id
from taskiq_fanin.groups import ledger
from taskiq_fanin.groups.group_validation import validate_group
from taskiq_fanin.groups.planning import plan_group
from taskiq_fanin.inspection import group_status
from taskiq_fanin.storage.group_scripts import GroupScripts
from taskiq_fanin.storage.keys import GroupKeys
from taskiq_fanin.sweeping import FindingKind, SweepAction
from tests.harness import (
    SentMessages,
    drained,
    eventually,
    lossy_stream_broker,
    overdue,
    stream_broker,
    worker,
)
from tests.slow_commands import assert_bounded, over_bound

SHORT = 0.3  # seconds: deadlines and leases short enough to pass within a test


class PlannerDiedError(Exception):
    """The planner's process died between two chunks (Redis away is retried)."""


class AppendSpy:
    """Counts ``appendLedger`` calls and how far the members were read by each."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, *, fail_first: bool = False):
        self.calls: list[tuple[int, int, int]] = []  # (first, count, members read)
        self.read = 0
        self.fail_first = fail_first
        original = GroupScripts.append_ledger

        async def spying(scripts: GroupScripts, *args: Any, **kwargs: Any) -> Any:
            self.calls.append((kwargs["first"], len(kwargs["members"]), self.read))
            if self.fail_first and len(self.calls) == 1:
                raise PlannerDiedError("the planner died between two chunks")
            return await original(scripts, *args, **kwargs)

        monkeypatch.setattr(GroupScripts, "append_ledger", spying)


@pytest.mark.parametrize("source", ["iterator", "async iterator"])
async def test_a_group_from_a_generator_completes_with_its_continuation_once(
    redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    monkeypatch.setattr(ledger, "CHUNK_MEMBERS", 500)
    spy = AppendSpy(monkeypatch)
    sent = SentMessages()
    broker, _ = stream_broker(redis_url, key_prefix, sent)
    results: list[GroupResult] = []
    values: list[list[Any]] = []
    size = 5_000

    @broker.task
    async def member(index: int) -> int:
        return index

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result)
        # Read in pages: a group this wide hands its results by reference.
        values.append([value async for _, value in result.iter_results()])

    def members() -> Iterator[Signature]:
        for i in range(size):
            spy.read += 1
            yield Signature.of(member, i)

    async def async_members() -> AsyncIterator[Signature]:
        for signature in members():
            yield signature

    source_of = members() if source == "iterator" else async_members()
    async with worker(broker, max_async_tasks=100) as receiver:
        handle = await group(source_of, then=then, group_id="wide").kiq(broker)
        await eventually(lambda: len(results) == 1, timeout=60, what="continuation")
        await drained(broker, receiver)
        status = await handle.status()

    # Nine chunks after createGroup's, each read at most one chunk ahead of
    # what was written: the planner never held the whole group.
    assert [(first, count) for first, count, _ in spy.calls] == [
        (500 * n, 500) for n in range(1, 10)
    ]
    assert all(read - (first + count) <= 500 for first, count, read in spy.calls)
    assert sent.executions_of(member.task_name) == size
    assert sent.executions_of(then.task_name) == 1
    (result,) = results
    assert (result.total, values[0]) == (size, list(range(size)))
    assert (status.state.value, status.total) == ("completed", size)


async def test_no_command_runs_10_ms_while_planning_20_000_members(
    key_prefix: str,
) -> None:
    with RedisServer(
        extra_args=[
            "--slowlog-log-slower-than",
            "10000",
            "--enable-debug-command",
            "local",
        ]
    ) as server:
        broker, fanin = stream_broker(server.url, key_prefix)

        @broker.task
        async def member(index: int) -> None:
            return None

        client = Redis.from_url(server.url)
        try:
            await broker.startup()
            await client.slowlog_reset()
            members = (Signature.of(member, i) for i in range(20_000))
            handle = await group(members, group_id="flat").kiq(broker)
            status = await handle.status()
            report = await sweep(fanin, dry_run=True)
            slow = await client.slowlog_get(128)
            # The log does catch a command over 10 ms, when there is one.
            await client.execute_command("DEBUG", "SLEEP", "0.02")
            caught = await client.slowlog_get(128)
        finally:
            await client.aclose()
            await broker.shutdown()

    assert (status.total, status.planned) == (20_000, True)
    assert report.findings == []
    assert_bounded(slow)
    # The newest entry, and the helper reading it, catch a command over 10 ms.
    assert [command for _, command in over_bound(caught[:1])] == [b"DEBUG SLEEP 0.02"]


async def test_a_planner_killed_between_chunks_is_finished_by_its_retry(
    redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same planner again (its token, as a chain step's) writes every chunk."""
    monkeypatch.setattr(ledger, "CHUNK_MEMBERS", 100)
    AppendSpy(monkeypatch, fail_first=True)
    sent = SentMessages()
    broker, fanin = stream_broker(redis_url, key_prefix, sent)
    results: list[GroupResult] = []
    values: list[list[Any]] = []

    @broker.task
    async def member(index: int) -> int:
        return index

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result)
        # Read in pages: a group this wide hands its results by reference.
        values.append([value async for _, value in result.iter_results()])

    def planned() -> Any:
        spec = group(
            [Signature.of(member, i) for i in range(250)], then=then, group_id="re"
        )
        return plan_group(ctx, validate_group(ctx, spec, token="c0ffee00c0ffee00"))

    async with worker(broker, max_async_tasks=50) as receiver:
        ctx = context_of(broker)
        with pytest.raises(PlannerDiedError):
            await planned()
        half = await group_status(fanin, "re")
        kicked_before = len(sent.of_task(member.task_name))
        await planned()
        await eventually(lambda: len(results) == 1, what="the continuation")
        await drained(broker, receiver)

    assert (half.total, half.planned, kicked_before) == (
        100,
        False,
        0,  # nothing kicked before the ledger was whole
    )
    assert sent.executions_of(member.task_name) == 250
    assert sent.executions_of(then.task_name) == 1
    assert values[0] == list(range(250))


async def test_a_planner_killed_between_chunks_is_finished_by_another_planner(
    redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another planner, once the dead one's lease ran out, finishes what the
    ledger holds: nothing it lacks is kicked, nothing in it is left."""
    monkeypatch.setattr(ledger, "CHUNK_MEMBERS", 100)
    AppendSpy(monkeypatch, fail_first=True)
    sent = SentMessages()
    broker, fanin = stream_broker(
        redis_url, key_prefix, sent, finaliser_lease=SHORT, deadline=60, ttl=600
    )
    results: list[GroupResult] = []
    values: list[list[Any]] = []

    @broker.task
    async def member(index: int) -> int:
        return index

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result)
        # Read in pages: a group this wide hands its results by reference.
        values.append([value async for _, value in result.iter_results()])

    def members() -> Iterator[Signature]:
        return (Signature.of(member, i) for i in range(250))

    async with worker(broker, max_async_tasks=50) as receiver:
        with pytest.raises(PlannerDiedError):
            await group(members(), then=then, group_id="dead").kiq(broker)
        keys = GroupKeys(key_prefix, "dead")
        await eventually(
            lambda: lease_over(fanin, keys), what="the dead planner's lease"
        )
        again = await group(members(), then=then, group_id="dead").kiq(broker)
        await eventually(lambda: len(results) == 1, what="the continuation")
        await drained(broker, receiver)

    assert again.created is False
    assert sent.executions_of(member.task_name) == 100  # the ledger's first chunk
    assert sent.executions_of(then.task_name) == 1
    assert (results[0].total, values[0]) == (100, list(range(100)))


async def test_a_planner_killed_between_chunks_is_finished_by_the_sweep(
    redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ledger, "CHUNK_MEMBERS", 100)
    AppendSpy(monkeypatch, fail_first=True)
    sent = SentMessages()
    broker, fanin = lossy_stream_broker(
        redis_url, key_prefix, sent, sweep_policy="redrive"
    )
    results: list[GroupResult] = []
    values: list[list[Any]] = []

    @broker.task
    async def member(index: int) -> int:
        return index

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result)
        # Read in pages: a group this wide hands its results by reference.
        values.append([value async for _, value in result.iter_results()])

    members = (Signature.of(member, i) for i in range(250))
    async with worker(broker, max_async_tasks=50) as receiver:
        with pytest.raises(PlannerDiedError):
            await group(members, then=then, group_id="swept", deadline=SHORT).kiq(
                broker
            )
        await eventually(lambda: overdue(fanin, "swept"), what="the group's deadline")
        report = await sweep(fanin)
        await eventually(lambda: len(results) == 1, what="the continuation")
        await drained(broker, receiver)
        status = await group_status(fanin, "swept")

    (finding,) = report.findings
    assert (finding.kind, finding.action, finding.applied) == (
        FindingKind.UNPLANNED,
        SweepAction.REDRIVE,
        True,
    )
    assert (finding.missing_count, finding.missing) == (100, list(range(20)))
    assert sent.executions_of(member.task_name) == 100
    assert sent.executions_of(then.task_name) == 1
    assert values[0] == list(range(100))
    assert (status.state.value, status.planned, status.redrives) == (
        "completed",
        True,
        1,
    )


async def test_the_sweep_redrives_2_500_missing_members_a_window_per_visit(
    redis_url: str, key_prefix: str
) -> None:
    sent = SentMessages()
    broker, fanin = lossy_stream_broker(
        redis_url, key_prefix, sent, sweep_policy="redrive"
    )
    results: list[GroupResult] = []
    values: list[list[Any]] = []
    size = 2_500

    @broker.task
    async def member(index: int) -> int:
        return index

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result)
        # Read in pages: a group this wide hands its results by reference.
        values.append([value async for _, value in result.iter_results()])

    # Every first kick is lost: the sweep finds 2,500 members missing.
    broker.drop = {member_task_id("lost", i) for i in range(size)}
    members = [Signature.of(member, i) for i in range(size)]
    await broker.startup()
    try:
        await group(members, then=then, group_id="lost", deadline=SHORT).kiq(broker)
        await eventually(lambda: overdue(fanin, "lost"), what="the group's deadline")
        visits, kicked = [], []
        for _ in range(3):
            before = broker.sent
            visits.append(await sweep(fanin))
            kicked.append(broker.sent - before)
        rest = await sweep(fanin, dry_run=True)  # the pass is over: on time again
    finally:
        await broker.shutdown()
    async with worker(broker, max_async_tasks=100) as receiver:
        await eventually(lambda: len(results) == 1, timeout=30, what="continuation")
        await drained(broker, receiver)
        status = await group_status(fanin, "lost")

    assert kicked == [1_000, 1_000, 500]
    findings = [visit.findings[0] for visit in visits]
    assert [(f.missing_count, f.missing[0], len(f.missing)) for f in findings] == [
        (2_500, 0, 20),
        (2_500, 1_000, 20),
        (2_500, 2_000, 20),
    ]
    assert all(f.applied for f in findings)
    assert rest.findings == []
    assert sent.executions_of(member.task_name) == size
    assert sent.executions_of(then.task_name) == 1
    assert values[0] == list(range(size))
    assert (status.state.value, status.redrives) == ("completed", 1)


@pytest.mark.parametrize("bad", ["too large", "too wide"])
async def test_a_bad_member_in_a_later_chunk_leaves_nothing_and_kicks_nothing(
    redis_url: str,
    redis_client: Redis,
    key_prefix: str,
    monkeypatch: pytest.MonkeyPatch,
    bad: str,
) -> None:
    """Members from an iterator are checked a chunk at a time: the chunks
    written before the bad one are taken back, nothing having been kicked."""
    monkeypatch.setattr(ledger, "CHUNK_MEMBERS", 100)
    spy = AppendSpy(monkeypatch)
    sent = SentMessages()
    broker, _ = stream_broker(
        redis_url, key_prefix, sent, max_group_size=650, max_member_bytes=1_000
    )

    @broker.task
    async def member(text: str) -> None:
        return None

    def members() -> Iterator[Signature]:
        for i in range(700):
            large = bad == "too large" and i == 640
            yield Signature.of(member, "x" * 2_000 if large else str(i))

    error, says = (
        (MemberTooLargeError, "Member 640 ")
        if bad == "too large"
        else (GroupTooWideError, "651")
    )
    await broker.startup()
    try:
        with pytest.raises(error, match=says):
            await group(members(), group_id="bad").kiq(broker)
    finally:
        await broker.shutdown()

    # Chunks 1-4 were written after createGroup's (chunk 5 read, not yet
    # written, when chunk 6 held the bad member).
    assert [first for first, _, _ in spy.calls] == [100, 200, 300, 400]
    assert sent.sent == []  # no member was kicked
    left = await redis_client.keys(f"{key_prefix}:*")
    assert left == [f"{key_prefix}:stream".encode()]  # the broker's, nothing else


async def test_a_group_of_members_from_an_iterator_is_kicked_once(
    redis_url: str, key_prefix: str
) -> None:
    """Its first kiq() read the iterator: a second would plan an empty group."""
    sent = SentMessages()
    broker, _ = stream_broker(redis_url, key_prefix, sent)

    @broker.task
    async def member(index: int) -> None:
        return None

    streamed = group(Signature.of(member, i) for i in range(3))
    await broker.startup()
    try:
        await streamed.kiq(broker)
        with pytest.raises(InvalidGroupError, match="build the group again"):
            await streamed.kiq(broker)
    finally:
        await broker.shutdown()

    assert len(sent.sent) == 3  # the first kiq's members, nothing more


def test_a_chain_refuses_a_group_of_members_from_an_iterator() -> None:
    async def member() -> None:
        return None

    streamed = group(iter([]))
    with pytest.raises(InvalidChainError, match="step 1 is a group of members from"):
        chain(streamed)


async def lease_over(fanin: Any, keys: GroupKeys) -> bool:
    """The planner's lease has run out, on Redis's clock."""
    ctx = context_of(fanin)
    meta = await ctx.redis.hmget(keys.meta, ["created", "planner_at"])
    last = int(meta[1] or meta[0])
    return await ctx.redis_now() * 1000 - last > SHORT * 1000
