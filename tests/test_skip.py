"""Skipped members on a real redis-server and a real Receiver: a member that
raises ``Skip("why")`` is recorded once as skipped with its reason, counts toward
its group, is neither done nor failed (``failure_policy="fail"`` does not fire),
is not retried, and shows in the ``GroupResult`` (inline and by reference) and
in the group's status.
"""

from collections import Counter
from typing import Any

import pytest
from taskiq import SimpleRetryMiddleware

from taskiq_fanin import GroupResult, Signature, Skip, group
from taskiq_fanin.models import GroupState
from taskiq_fanin.storage.result_pages import ResultPageReader
from tests.harness import (
    DuplicatingMiddleware,
    drained,
    eventually,
    stream_broker,
    worker,
)

MEMBERS = 6
SKIPPED = (1, 4)


async def test_skipped_members_count_once_and_fail_nothing(
    redis_url: str, key_prefix: str
) -> None:
    """Member 1 is delivered twice; a retry middleware retries every error."""
    twice = DuplicatingMiddleware(lambda m: m.task_id == "photos~1")
    retry = SimpleRetryMiddleware(default_retry_count=3)
    broker, _ = stream_broker(redis_url, key_prefix, twice, retry)
    runs: Counter[int] = Counter()
    results: list[GroupResult] = []
    errors: list[object] = []

    @broker.task(retry_on_error=True)
    async def resize(index: int) -> int:
        runs[index] += 1
        if index in SKIPPED:
            raise Skip(f"photo {index} is not an image")
        return index * 10

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result)

    @broker.task
    async def on_error(result: GroupResult) -> None:
        errors.append(result)

    members = [Signature.of(resize, i) for i in range(MEMBERS)]
    async with worker(broker, max_async_tasks=4) as receiver:
        handle = await group(
            members,
            then=then,
            on_error=on_error,
            failure_policy="fail",
            group_id="photos",
        ).kiq(broker)
        await eventually(lambda: len(results) == 1, what="the continuation")
        await drained(broker, receiver)
        status = await handle.status()

    (result,) = results
    assert len(twice.duplicated) == 1
    assert runs == {0: 1, 1: 2, 2: 1, 3: 1, 4: 1, 5: 1}  # the duplicate, no retry
    assert result.skipped == {i: f"photo {i} is not an image" for i in SKIPPED}
    assert result.succeeded == [0, 2, 3, 5]
    assert result.results == [0, 20, 30, 50]
    assert (result.done_count, result.failed_count, result.skipped_count) == (4, 0, 2)
    assert errors == []
    assert (status.state, status.total) == (GroupState.COMPLETED, MEMBERS)
    assert (status.done, status.failed, status.skipped, status.pending) == (4, 0, 2, 0)


async def test_a_group_by_reference_pages_its_skipped_members_apart(
    redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two skipped of six, two a page: the done set (four done, two skipped)
    is wider than a page, so neither kind is read whole (``every``)."""
    broker, _ = stream_broker(redis_url, key_prefix)
    read_whole: list[str] = []
    every = ResultPageReader.every

    async def counted(self: ResultPageReader, *args: Any) -> Any:
        read_whole.append(args[2])
        return await every(self, *args)

    monkeypatch.setattr(ResultPageReader, "every", counted)
    seen: list[tuple[list[tuple[int, int]], list[tuple[int, str]], int, int]] = []

    @broker.task
    async def resize(index: int) -> int:
        if index in SKIPPED:
            raise Skip(f"no {index}")
        return index

    @broker.task
    async def then(result: GroupResult) -> None:
        got = [item async for item in result.iter_results(page_size=2)]
        skipped = [item async for item in result.iter_skipped(page_size=2)]
        seen.append((got, skipped, result.done_count, result.skipped_count))

    members = [Signature.of(resize, i) for i in range(MEMBERS)]
    async with worker(broker, max_async_tasks=4) as receiver:
        await group(members, then=then, results_inline_max=2).kiq(broker)
        await eventually(lambda: len(seen) == 1, what="the continuation")
        await drained(broker, receiver)

    (got, skipped, done, skipped_count) = seen[0]
    assert got == [(0, 0), (2, 2), (3, 3), (5, 5)]
    assert skipped == [(1, "no 1"), (4, "no 4")]
    assert (done, skipped_count) == (4, 2)
    assert read_whole == []


def test_skip_is_a_no_result_error_with_its_reason() -> None:
    from taskiq import NoResultError

    skip = Skip("not a video")
    assert isinstance(skip, NoResultError)
    assert skip.reason == "not a video"
    assert str(skip) == "Skipped: not a video"
    assert Skip(42).reason == "42"  # whatever it is given, a reason is text
