"""Groups that grow, then seal, on a real redis-server with a real Receiver:
members added from a client and from members' bodies, a seal before and after
the last completion, additions after the seal refused with nothing written, a
window, results by reference, a chain's group step, the sweep's give-up, and
bad input refused before anything is written.
"""

import asyncio

import pytest

from taskiq_fanin import GroupResult, Signature, chain, group, group_handle, sweep
from taskiq_fanin.errors import (
    GroupNotFoundError,
    GroupPlanConflictError,
    GroupSealedError,
    GroupTooWideError,
    InvalidGroupError,
    UnknownTaskError,
)
from taskiq_fanin.models import ChainState, GroupState
from taskiq_fanin.sweeping import FindingKind
from tests.harness import (
    DuplicatingMiddleware,
    drained,
    eventually,
    overdue,
    stream_broker,
    worker,
)
from tests.window_probe import InFlightProbe

SHORT = 0.3  # seconds: a deadline short enough to pass within a test


async def test_members_added_by_a_client_and_by_members_finish_once_after_the_seal(
    redis_url: str, key_prefix: str
) -> None:
    """Page 100 is planned; the client adds pages 0-2, each of which adds a
    child from its body.

    Every member ends before the seal, one of them delivered twice: the group
    stays open; the seal then completes it at once, its continuation once.
    """
    twice = DuplicatingMiddleware(lambda m: m.task_id == "crawl~2")
    broker, _ = stream_broker(redis_url, key_prefix, twice)
    results: list[GroupResult] = []

    @broker.task
    async def page(number: int) -> int:
        if number < 3:
            added = await group_handle(broker, "crawl").add(
                [Signature.of(page, number + 10)]
            )
            assert len(added) == 1
        return number

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result)

    async with worker(broker, max_async_tasks=4) as receiver:
        first = [Signature.of(page, 100)]
        handle = await group(first, then=then, group_id="crawl", open=True).kiq(broker)
        added = await handle.add([Signature.of(page, n) for n in range(3)])
        assert added == range(1, 4)

        async def all_ended() -> bool:
            status = await handle.status()
            return status.total >= 7 and status.done == status.total

        await eventually(all_ended, what="seven members ended")
        await drained(broker, receiver)
        before = await handle.status()
        assert (before.state, before.total, before.sealed) == (
            GroupState.OPEN,
            7,
            False,
        )
        assert results == []  # every member ended, none finalised it

        assert await handle.seal() == 7
        await eventually(lambda: len(results) == 1, what="the continuation")
        assert await handle.seal() == 7  # again: nothing more
        await drained(broker, receiver)
        after = await handle.status()

    (result,) = results
    assert twice.duplicated
    assert result.total == 7
    assert result.results[:4] == [100, 0, 1, 2]  # indexes follow the additions
    assert sorted(result.results[4:]) == [10, 11, 12]
    assert (after.state, after.sealed, after.planned_open) == (
        GroupState.COMPLETED,
        True,
        True,
    )


async def test_a_seal_before_the_last_completion_waits_for_it(
    redis_url: str, key_prefix: str
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix)
    results: list[GroupResult] = []
    release = asyncio.Event()
    started: list[int] = []

    @broker.task
    async def slow(number: int) -> int:
        started.append(number)
        await asyncio.wait_for(release.wait(), timeout=20)
        return number

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result)

    async with worker(broker, max_async_tasks=4) as receiver:
        handle = await group(
            [Signature.of(slow, 0)], then=then, group_id="late", open=True
        ).kiq(broker)
        await handle.add([Signature.of(slow, 1)])
        assert await handle.seal() == 2
        await eventually(lambda: len(started) == 2, what="both members started")

        with pytest.raises(GroupSealedError, match="it is sealed"):
            await handle.add([Signature.of(slow, 2)])
        sealed = await handle.status()
        assert (sealed.state, sealed.total, sealed.sealed) == (GroupState.OPEN, 2, True)

        release.set()
        await eventually(lambda: len(results) == 1, what="the continuation")
        await drained(broker, receiver)

    assert results[0].results == [0, 1]
    assert sorted(started) == [0, 1]  # the refused member was never kicked


async def test_an_open_windowed_group_keeps_its_window(
    redis_url: str, redis_client: object, key_prefix: str
) -> None:
    """Added batches run within the window, each member once; none left behind."""
    from redis.asyncio import Redis

    assert isinstance(redis_client, Redis)
    probe = InFlightProbe(redis_client, key_prefix, "wide")
    broker, _ = stream_broker(redis_url, key_prefix)
    results: list[GroupResult] = []

    @broker.task
    async def member(index: int) -> int:
        async def body() -> int:
            await asyncio.sleep(0.01)
            return index

        return int(await probe.run(index, body))

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result)

    async with worker(broker, max_async_tasks=10) as receiver:
        handle = await group(
            [Signature.of(member, 0)],
            then=then,
            group_id="wide",
            open=True,
            max_in_flight=2,
        ).kiq(broker)
        for start in (1, 5, 9):
            await handle.add([Signature.of(member, i) for i in range(start, start + 4)])
        await handle.seal()
        await eventually(lambda: len(results) == 1, timeout=30, what="continuation")
        await drained(broker, receiver)

    assert results[0].results == list(range(13))
    assert await probe.members_ran() == set(range(13))
    assert await probe.most() <= 2


async def test_an_open_group_hands_its_results_by_reference(
    redis_url: str, key_prefix: str
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix)
    seen: list[list[tuple[int, int]]] = []

    @broker.task
    async def member(index: int) -> int:
        return index * 2

    @broker.task
    async def then(result: GroupResult) -> None:
        seen.append([item async for item in result.iter_results(page_size=2)])

    async with worker(broker, max_async_tasks=4) as receiver:
        handle = await group(
            [Signature.of(member, 0)], then=then, open=True, results_inline_max=2
        ).kiq(broker)
        await handle.add([Signature.of(member, i) for i in (1, 2, 3, 4)])
        await handle.seal()
        await eventually(lambda: len(seen) == 1, what="the continuation")
        await drained(broker, receiver)

    assert seen == [[(i, i * 2) for i in range(5)]]


async def test_a_chains_group_step_planned_open_grows_then_seals(
    redis_url: str, key_prefix: str
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix)
    ends: list[list[int]] = []

    @broker.task
    async def fetch() -> int:
        return 2

    @broker.task
    async def part(previous: int, index: int) -> int:
        return previous + index

    @broker.task
    async def report(result: GroupResult) -> None:
        ends.append(result.results)

    steps = [
        Signature.of(fetch),
        group([Signature.of(part, 0)], open=True),
        Signature.of(report),
    ]
    async with worker(broker, max_async_tasks=4) as receiver:
        handle = await chain(*steps, chain_id="album").kiq(broker)

        async def at_the_group() -> bool:
            return (await handle.status()).step_group_id is not None

        await eventually(at_the_group, what="the group step")
        step_group = group_handle(broker, (await handle.status()).step_group_id or "")
        assert step_group.group_id == "album~1"
        await step_group.add([Signature.of(part, 1, 2), Signature.of(part, 2, 3)])
        await step_group.seal()
        await eventually(lambda: len(ends) == 1, what="the last step")
        await drained(broker, receiver)
        status = await handle.status()

    assert ends == [[2, 3, 5]]  # 2 + 0, and the added ones: arguments as given
    assert (status.state, status.step_group_id) == (ChainState.DONE, None)


async def test_an_open_group_never_sealed_is_stuck_and_a_give_up_seals_it(
    redis_url: str, key_prefix: str
) -> None:
    broker, fanin = stream_broker(redis_url, key_prefix)
    results: list[GroupResult] = []

    @broker.task
    async def member(index: int) -> int:
        return index

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result)

    async with worker(broker, max_async_tasks=4) as receiver:
        handle = await group(
            [Signature.of(member, 0)],
            then=then,
            group_id="forgot",
            open=True,
            deadline=SHORT,
        ).kiq(broker)
        await handle.add([Signature.of(member, 1)])
        await eventually(
            lambda: overdue(fanin, "forgot"), what="the deadline, both done"
        )
        await eventually(lambda: _all_done(handle.status, 2), what="both members ended")
        reported = await sweep(fanin)
        assert [(f.group_id, f.kind) for f in reported.findings] == [
            ("forgot", FindingKind.UNSEALED)
        ]
        assert reported.stuck  # counted stuck: --fail-on-stuck fails on it
        await drained(broker, receiver)
        assert results == []

        given_up = await sweep(fanin, sweep_policy="give_up")
        assert [f.kind for f in given_up.findings] == [FindingKind.UNSEALED]
        await eventually(lambda: len(results) == 1, what="the continuation")
        with pytest.raises(GroupSealedError):
            await handle.add([Signature.of(member, 2)])
        await drained(broker, receiver)

    assert results[0].results == [0, 1]
    assert results[0].lost_count == 0


async def _all_done(read: object, total: int) -> bool:
    status = await read()  # type: ignore[operator]
    return bool(status.total == total and status.done == total)


async def test_bad_additions_are_refused_before_anything_is_written(
    redis_url: str, key_prefix: str
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix, max_group_size=3)

    @broker.task
    async def member(index: int) -> int:
        return index

    async with worker(broker, max_async_tasks=4) as receiver:
        with pytest.raises(GroupNotFoundError, match="never planned"):
            await group_handle(broker, "nowhere").add([Signature.of(member, 0)])
        with pytest.raises(GroupNotFoundError):
            await group_handle(broker, "nowhere").seal()

        closed = await group([Signature.of(member, 0)], group_id="closed").kiq(broker)
        with pytest.raises(GroupSealedError, match="without open=True"):
            await closed.add([Signature.of(member, 1)])

        handle = await group(
            [Signature.of(member, 0)], group_id="grows", open=True
        ).kiq(broker)
        with pytest.raises(InvalidGroupError, match="one Signature"):
            await handle.add(Signature.of(member, 1))  # type: ignore[arg-type]
        with pytest.raises(UnknownTaskError):
            await handle.add([Signature(task_name="no.such:task")])
        with pytest.raises(GroupTooWideError):
            await handle.add([Signature.of(member, i) for i in range(1, 4)])
        assert (await handle.status()).total == 1
        assert await handle.add([]) == range(1, 1)

        # Planned again: the same members are the same group, others refused.
        again = await group([Signature.of(member, 0)], group_id="grows", open=True).kiq(
            broker
        )
        assert again.created is False
        with pytest.raises(GroupPlanConflictError, match=r"open=True.*add"):
            await group([Signature.of(member, 5)], group_id="grows", open=True).kiq(
                broker
            )
        await handle.seal()
        await drained(broker, receiver)
        assert (await handle.status()).state is GroupState.COMPLETED
