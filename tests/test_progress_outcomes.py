"""Progress and outcomes as they happen, on a real redis-server with a real
Receiver: a reader that follows a group live, one that starts once it has
ended, one that resumes after a cursor; a progress with counts, rate and time
left while members run; a windowed group's in-flight count; a chain's steps
and its group step's progress; missing ids and bad cursors.
"""

import asyncio
from typing import Any

import pytest

from taskiq_fanin import (
    GroupResult,
    Signature,
    Skip,
    chain,
    chain_handle,
    group,
    group_handle,
)
from taskiq_fanin.errors import (
    ChainNotFoundError,
    GroupNotFoundError,
    InvalidOptionError,
)
from taskiq_fanin.inspection import progress
from taskiq_fanin.models import ChainState, GroupState, MemberOutcome, StepOutcome
from taskiq_fanin.storage.keys import group_keys
from taskiq_fanin.storage.outcome_stream import START, read_after
from tests.harness import (
    DuplicatingMiddleware,
    drained,
    eventually,
    stream_broker,
    worker,
)

MEMBERS = 30
#: A reader's bound: it must end by itself well within it.
READ_BOUND = 30.0


async def _read_all(outcomes: Any) -> list[Any]:
    """Every item of an outcome iterator, which must end by itself."""

    async def read() -> list[Any]:
        return [outcome async for outcome in outcomes]

    return await asyncio.wait_for(read(), timeout=READ_BOUND)


def _expected(index: int) -> str:
    if index % 10 == 3:
        return "failed"
    if index % 10 == 7:
        return "skipped"
    return "done"


async def test_readers_live_late_and_resumed_see_every_outcome_once(
    redis_url: str, key_prefix: str
) -> None:
    """Members end in two halves, one of them delivered twice; a live reader
    sees every outcome once as it is recorded, in the order recorded; a late
    reader reads the same from the start; a reader resuming after the tenth
    cursor reads the last twenty."""
    twice = DuplicatingMiddleware(lambda m: m.task_id == "pics~5")
    broker, _ = stream_broker(redis_url, key_prefix, twice)
    gates = {0: asyncio.Event(), 1: asyncio.Event()}
    results: list[GroupResult] = []

    @broker.task
    async def photo(index: int) -> int:
        await asyncio.wait_for(gates[index % 2].wait(), timeout=20)
        if _expected(index) == "failed":
            raise ValueError(f"photo {index} is broken")
        if _expected(index) == "skipped":
            raise Skip(f"photo {index} is not an image")
        return index * 10

    @broker.task
    async def publish(result: GroupResult) -> None:
        results.append(result)

    members = [Signature.of(photo, i) for i in range(MEMBERS)]
    async with worker(broker, max_async_tasks=MEMBERS + 2) as receiver:
        handle = await group(members, then=publish, group_id="pics").kiq(broker)
        live = asyncio.create_task(_read_all(handle.outcomes()))
        gates[0].set()

        async def half_ended() -> bool:
            done = await handle.status()
            return done.done + done.failed + done.skipped == MEMBERS // 2

        await eventually(half_ended, what="the even members to end")
        assert not live.done()  # the group is open: the live reader waits
        gates[1].set()
        seen: list[MemberOutcome] = await live
        await eventually(lambda: len(results) == 1, what="the continuation")
        await drained(broker, receiver)
        late: list[MemberOutcome] = await _read_all(handle.outcomes())
        resumed = await _read_all(handle.outcomes(after=seen[9].cursor))

    assert twice.duplicated
    assert sorted(o.index for o in seen) == list(range(MEMBERS))  # each once
    assert {o.index for o in seen[: MEMBERS // 2]} == set(range(0, MEMBERS, 2))
    order = [tuple(map(int, o.cursor.split("-"))) for o in seen]
    assert order == sorted(set(order))  # in the order recorded, each its own
    for outcome in seen:
        assert outcome.state == _expected(outcome.index)
        if outcome.state == "done":
            assert (outcome.result, outcome.error) == (outcome.index * 10, None)
        elif outcome.state == "failed":
            assert outcome.error is not None
            assert outcome.error.type == "ValueError"
            assert f"photo {outcome.index} is broken" in outcome.error.message
        else:
            assert outcome.error is not None
            assert outcome.error.type == "Skip"
            assert outcome.error.message == f"photo {outcome.index} is not an image"
    assert late == seen
    assert resumed == seen[10:]
    (result,) = results
    assert result.done_count + result.failed_count + result.skipped_count == MEMBERS


async def test_each_entry_counts_the_groups_outcomes_so_far(
    redis_url: str, key_prefix: str
) -> None:
    """What a rate is counted by: 1 to N in the order recorded, failures and
    skips included, a member delivered twice counted once."""
    twice = DuplicatingMiddleware(lambda m: m.task_id == "counted~4")
    broker, fanin = stream_broker(redis_url, key_prefix, twice)

    @broker.task
    async def item(index: int) -> int:
        if _expected(index) == "failed":
            raise ValueError("broken")
        if _expected(index) == "skipped":
            raise Skip("not an image")
        return index

    async with worker(broker, max_async_tasks=4) as receiver:
        handle = await group(
            [Signature.of(item, i) for i in range(12)], group_id="counted"
        ).kiq(broker)
        await eventually(lambda: _ended(handle), what="the group to end")
        await drained(broker, receiver)
        key = group_keys(key_prefix, "counted").outcomes
        entries = await read_after(fanin.context.redis, key, START, count=100)

    assert twice.duplicated
    assert sorted(e.index for e in entries) == list(range(12))
    assert [e.ordinal for e in entries] == list(range(1, 13))


async def _ended(handle: Any) -> bool:
    return bool((await handle.progress()).ended)


async def test_progress_gives_counts_rate_and_time_left_while_members_run(
    redis_url: str, key_prefix: str
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix)
    release = asyncio.Event()

    @broker.task
    async def item(index: int) -> int:
        if index >= 20:
            await asyncio.wait_for(release.wait(), timeout=20)
        return index

    async with worker(broker, max_async_tasks=50) as receiver:
        handle = await group([Signature.of(item, i) for i in range(40)]).kiq(broker)

        async def half() -> bool:
            return (await handle.progress()).done == 20

        await eventually(half, what="the first twenty members")
        midway = await handle.progress()
        release.set()

        async def ended() -> bool:
            return (await handle.progress()).ended

        await eventually(ended, what="the group to end")
        await drained(broker, receiver)
        final = await handle.progress()
        by_id = await progress(broker, handle.group_id)

    assert (midway.total, midway.done, midway.failed, midway.skipped) == (40, 20, 0, 0)
    assert midway.state is GroupState.OPEN
    assert not midway.ended
    assert midway.percent == 50.0
    assert midway.open is False
    assert midway.in_flight is None
    assert midway.rate is not None
    assert midway.rate > 0
    assert midway.eta_seconds is not None
    assert midway.eta_seconds > 0
    assert final.ended
    assert final.percent == 100.0
    assert final.done == 40
    assert final.eta_seconds is None
    assert by_id.model_dump(exclude={"read_at", "rate"}) == final.model_dump(
        exclude={"read_at", "rate"}
    )


async def test_a_windowed_group_reports_its_members_in_flight(
    redis_url: str, key_prefix: str
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix)
    release = asyncio.Event()

    @broker.task
    async def item(index: int) -> int:
        await asyncio.wait_for(release.wait(), timeout=20)
        return index

    async with worker(broker, max_async_tasks=10) as receiver:
        members = [Signature.of(item, i) for i in range(12)]
        handle = await group(members, max_in_flight=3).kiq(broker)
        first = await handle.progress()
        release.set()
        outcomes = await _read_all(handle.outcomes())
        await drained(broker, receiver)
        last = await handle.progress()

    assert first.in_flight == 3
    assert first.done == 0
    assert sorted(o.index for o in outcomes) == list(range(12))
    assert last.in_flight == 0
    assert last.ended


async def test_an_open_group_has_no_time_left_until_sealed(
    redis_url: str, key_prefix: str
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix)

    @broker.task
    async def item(index: int) -> int:
        return index

    async with worker(broker, max_async_tasks=10) as receiver:
        handle = await group(
            [Signature.of(item, i) for i in range(5)], group_id="grow", open=True
        ).kiq(broker)

        async def five() -> bool:
            return (await handle.progress()).done == 5

        await eventually(five, what="five members")
        growing = await handle.progress()
        reader = asyncio.create_task(_read_all(handle.outcomes()))
        await handle.add([Signature.of(item, 5)])

        async def six() -> bool:
            return (await handle.progress()).done == 6

        await eventually(six, what="the added member")
        assert not reader.done()  # not sealed: more may come
        await handle.seal()
        seen = await reader
        await drained(broker, receiver)

    assert growing.open
    assert growing.eta_seconds is None
    assert not growing.ended
    assert sorted(o.index for o in seen) == list(range(6))


async def test_a_cancelled_group_ends_its_readers(
    redis_url: str, key_prefix: str
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix)
    release = asyncio.Event()

    @broker.task
    async def item(index: int) -> int:
        if index > 0:
            await asyncio.wait_for(release.wait(), timeout=20)
        return index

    async with worker(broker, max_async_tasks=10) as receiver:
        handle = await group([Signature.of(item, i) for i in range(4)]).kiq(broker)
        reader = asyncio.create_task(_read_all(handle.outcomes()))

        async def first_ended() -> bool:
            return (await handle.progress()).done == 1

        await eventually(first_ended, what="the first member")
        assert await handle.cancel()
        seen = await reader
        release.set()
        await drained(broker, receiver)
        after = await handle.progress()

    assert [o.index for o in seen] == [0]
    assert after.state is GroupState.CANCELLED
    assert after.ended


async def test_a_chain_reports_its_steps_and_its_group_step_progress(
    redis_url: str, key_prefix: str
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix)
    release = asyncio.Event()

    @broker.task
    async def fetch() -> int:
        return 1

    @broker.task
    async def resize(size: int) -> int:
        if size > 0:
            await asyncio.wait_for(release.wait(), timeout=20)
        return size

    @broker.task
    async def publish(result: GroupResult) -> int:
        return result.done_count

    async with worker(broker, max_async_tasks=10) as receiver:
        steps = chain(
            Signature.of(fetch),
            group([Signature.of(resize, s).immutable() for s in range(4)]),
            Signature.of(publish),
            chain_id="album",
        )
        handle = await steps.kiq(broker)
        reader = asyncio.create_task(_read_all(handle.outcomes()))

        async def at_group() -> bool:
            now = await handle.progress()
            return now.step == 2 and now.group is not None and now.group.done == 1

        await eventually(at_group, what="the group step under way")
        midway = await handle.progress()
        release.set()
        seen: list[StepOutcome] = await reader
        await drained(broker, receiver)
        final = await chain_handle(broker, "album").progress()
        resumed = await _read_all(chain_handle(broker, "album").outcomes(after="1"))

    assert midway.steps == 3
    assert midway.state is ChainState.RUNNING
    assert midway.group is not None
    assert midway.group.total == 4
    assert [(o.step, o.name, o.state) for o in seen] == [
        (1, fetch.task_name, "done"),
        (2, "group of 4", "done"),
        (3, publish.task_name, "done"),
    ]
    assert final.ended
    assert final.step == 3
    assert final.state is ChainState.DONE
    assert [o.step for o in resumed] == [2, 3]


async def test_missing_ids_and_bad_cursors_are_refused(
    redis_url: str, key_prefix: str
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix)
    await broker.startup()
    try:
        with pytest.raises(GroupNotFoundError):
            await _read_all(group_handle(broker, "nothing").outcomes())
        with pytest.raises(ChainNotFoundError):
            await _read_all(chain_handle(broker, "nothing").outcomes())
        # At the call, before any read: what is no stream id, or one past the
        # largest Redis has (64-bit parts, and an id after it to read from).
        for cursor in (
            "x",
            "99999999999999999999-0",
            f"1-{2**64 - 1}",
            "\u0661-\u0662",
        ):  # Arabic-Indic digits
            with pytest.raises(InvalidOptionError):
                group_handle(broker, "nothing").outcomes(after=cursor)
        for cursor in ("1-0", "²", "-1"):
            with pytest.raises(InvalidOptionError):
                chain_handle(broker, "nothing").outcomes(after=cursor)
        # The largest cursor Redis could give is taken, and reads nothing.
        with pytest.raises(GroupNotFoundError):
            await _read_all(
                group_handle(broker, "nothing").outcomes(after=f"{2**64 - 1}-0")
            )
        missing = await progress(broker, "nothing")
        assert missing.state is GroupState.MISSING
        assert not missing.percent
    finally:
        await broker.shutdown()


async def test_a_large_result_is_cut_from_the_stream_not_from_the_group(
    redis_url: str, key_prefix: str
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix)
    results: list[GroupResult] = []

    @broker.task
    async def item(index: int) -> str:
        return "x" * (5000 if index == 1 else 10)

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result)

    async with worker(broker, max_async_tasks=4) as receiver:
        handle = await group([Signature.of(item, i) for i in range(2)], then=then).kiq(
            broker
        )
        seen = sorted(await _read_all(handle.outcomes()), key=lambda o: o.index)
        await eventually(lambda: len(results) == 1, what="the continuation")
        await drained(broker, receiver)

    assert [(o.kept, o.result) for o in seen] == [(True, "x" * 10), (False, None)]
    assert results[0].results[1] == "x" * 5000  # the group kept it
