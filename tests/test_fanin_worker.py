"""The fan-in core against a real redis-server and a real taskiq Receiver with
bounded ``max_async_tasks``: albums, duplicates, races, failures and retries.
"""

import asyncio
import logging
import random
from collections import defaultdict
from typing import Any

import pytest
from redis.asyncio import Redis
from taskiq import SimpleRetryMiddleware

from taskiq_fanin import GroupResult, Signature, group, group_task
from taskiq_fanin.domain.labels import MEMBER_LABEL, MemberRef
from taskiq_fanin.storage.keys import GroupKeys
from tests.harness import (
    DuplicatingMiddleware,
    SentMessages,
    drained,
    eventually,
    stream_broker,
    worker,
)

ALBUMS = 10
IMAGES = 5


async def test_ten_albums_at_ten_slots_each_publish_once_after_their_five_images(
    redis_url: str, key_prefix: str
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix)
    resized: dict[int, set[int]] = defaultdict(set)
    published: list[tuple[int, set[int], GroupResult]] = []

    @broker.task
    async def resize(album: int, image: int) -> str:
        await asyncio.sleep(0.2)
        resized[album].add(image)
        return f"{album}/{image}.jpg"

    @broker.task
    async def publish(result: GroupResult, album: int) -> None:
        published.append((album, set(resized[album]), result))

    @broker.task
    @group_task()
    async def make_album(album: int) -> object:
        members = [Signature.of(resize, album, image) for image in range(IMAGES)]
        return group(members, then=Signature.of(publish, album))

    async with worker(broker, max_async_tasks=10) as receiver:
        for album in range(ALBUMS):
            await make_album.kiq(album)
        await eventually(lambda: len(published) >= ALBUMS, what="10 albums")
        await drained(broker, receiver)

    assert sorted(album for album, _, _ in published) == list(range(ALBUMS))
    for album, images_at_publish, result in published:
        assert images_at_publish == set(range(IMAGES))
        assert result.succeeded == list(range(IMAGES))
        assert result.results == [f"{album}/{i}.jpg" for i in range(IMAGES)]
        assert result.failed == {}


async def test_duplicate_deliveries_never_fire_a_continuation_early_or_twice(
    redis_url: str, key_prefix: str
) -> None:
    rng = random.Random(7)
    duplicates = DuplicatingMiddleware(
        lambda m: MEMBER_LABEL in m.labels and rng.random() < 0.1
    )
    broker, _ = stream_broker(redis_url, key_prefix, duplicates)
    runs: dict[tuple[int, int], int] = defaultdict(int)
    distinct_done: dict[int, set[int]] = defaultdict(set)
    published: list[tuple[int, int]] = []

    @broker.task
    async def resize(album: int, image: int) -> None:
        await asyncio.sleep(rng.random() * 0.05)
        runs[album, image] += 1
        distinct_done[album].add(image)

    @broker.task
    async def publish(result: GroupResult, album: int) -> None:
        published.append((album, len(distinct_done[album])))

    async with worker(broker, max_async_tasks=20) as receiver:
        for album in range(ALBUMS):
            members = [Signature.of(resize, album, i) for i in range(IMAGES)]
            await group(members, then=Signature.of(publish, album)).kiq(broker)
        await eventually(lambda: len(published) >= ALBUMS, what="10 albums")
        await eventually(
            lambda: sum(runs.values()) == ALBUMS * IMAGES + len(duplicates.duplicated),
            what="every duplicate delivery to run",
        )
        await drained(broker, receiver)

    assert len(duplicates.duplicated) > 0, "the seed must produce duplicates"
    assert any(count == 2 for count in runs.values())
    assert sorted(album for album, _ in published) == list(range(ALBUMS))
    assert all(distinct == IMAGES for _, distinct in published)


async def test_fifty_racing_deliveries_of_the_last_member_fire_one_continuation(
    redis_url: str, key_prefix: str
) -> None:
    sent = SentMessages()
    broker, _ = stream_broker(redis_url, key_prefix, sent)
    release = asyncio.Event()
    waiting_copies = 0
    continuations: list[GroupResult] = []

    @broker.task
    async def member(index: int) -> int:
        nonlocal waiting_copies
        if index == 2:
            waiting_copies += 1
            await release.wait()  # every copy of the last member finishes at once
        return index

    @broker.task
    async def then(result: GroupResult) -> None:
        continuations.append(result)

    async with worker(broker, max_async_tasks=60) as receiver:
        members = [Signature.of(member, i) for i in range(3)]
        handle = await group(members, then=then).kiq(broker)
        (last,) = [m for m in sent.of_task(member.task_name) if m.args == [2]]
        for _ in range(49):
            await sent.resend(last)
        await eventually(
            lambda: waiting_copies == 50,
            what=f"50 copies of the last member running (have {waiting_copies})",
            timeout=8,
        )
        release.set()
        await eventually(lambda: len(continuations) >= 1, what="the continuation")
        await drained(broker, receiver)
        status = await handle.status()

    assert len(continuations) == 1
    assert continuations[0].results == [0, 1, 2]
    assert status.done == 3


async def test_a_member_that_fails_for_good_is_in_the_group_result(
    redis_url: str, key_prefix: str
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix)
    results: list[GroupResult] = []

    @broker.task
    async def member(index: int) -> int:
        if index == 1:
            raise ValueError("image 1 is corrupt")
        return index * 10

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result)

    async with worker(broker, max_async_tasks=5) as receiver:
        await group([Signature.of(member, i) for i in range(3)], then=then).kiq(broker)
        await eventually(lambda: len(results) == 1, what="the continuation")
        await drained(broker, receiver)

    (result,) = results
    assert result.succeeded == [0, 2]
    assert result.results == [0, 20]
    assert list(result.failed) == [1]
    assert result.failed[1].type == "ValueError"
    assert result.failed[1].message == "image 1 is corrupt"
    assert not result.ok


async def test_with_policy_fail_only_the_error_continuation_runs_once(
    redis_url: str, key_prefix: str
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix)
    ran: list[str] = []

    @broker.task
    async def member(index: int) -> None:
        if index == 0:
            raise RuntimeError("boom")

    @broker.task
    async def then(result: GroupResult) -> None:
        ran.append("then")

    @broker.task
    async def on_error(result: GroupResult, tag: str) -> None:
        ran.append(f"on_error {tag} {sorted(result.failed)}")

    async with worker(broker, max_async_tasks=5) as receiver:
        members = [Signature.of(member, i) for i in range(3)]
        spec = group(
            members,
            then=then,
            on_error=Signature.of(on_error, "x"),
            failure_policy="fail",
        )
        await spec.kiq(broker)
        await eventually(lambda: len(ran) == 1, what="a continuation")
        await drained(broker, receiver)

    assert ran == ["on_error x [0]"]


async def test_a_member_that_succeeds_on_retry_is_recorded_as_done_only(
    redis_url: str, key_prefix: str
) -> None:
    broker, _ = stream_broker(
        redis_url, key_prefix, SimpleRetryMiddleware(default_retry_count=3)
    )
    attempts: dict[int, int] = defaultdict(int)
    results: list[GroupResult] = []

    @broker.task(retry_on_error=True)
    async def flaky(index: int) -> int:
        attempts[index] += 1
        if index == 0 and attempts[index] == 1:
            raise ConnectionError("transient")
        return index

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result)

    async with worker(broker, max_async_tasks=5) as receiver:
        handle = await group([Signature.of(flaky, i) for i in range(2)], then=then).kiq(
            broker
        )
        await eventually(lambda: len(results) == 1, what="the continuation")
        status = await handle.status()
        await drained(broker, receiver)

    assert attempts[0] == 2
    assert results[0].succeeded == [0, 1]
    assert results[0].failed == {}
    assert (status.done, status.failed) == (2, 0)


async def test_a_member_that_exhausts_its_retries_counts_once_as_failed(
    redis_url: str, key_prefix: str
) -> None:
    broker, _ = stream_broker(
        redis_url, key_prefix, SimpleRetryMiddleware(default_retry_count=3)
    )
    attempts: list[int] = []
    results: list[GroupResult] = []

    @broker.task(retry_on_error=True)
    async def doomed(index: int) -> None:
        attempts.append(index)
        raise ConnectionError(f"attempt {len(attempts)}")

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result)

    async with worker(broker, max_async_tasks=5) as receiver:
        await group([Signature.of(doomed, 0)], then=then).kiq(broker)
        await eventually(lambda: len(results) == 1, what="the continuation")
        await drained(broker, receiver)

    assert len(attempts) == 3
    assert results[0].failed[0].message == "attempt 3"


async def test_a_redelivered_continuation_that_completed_does_not_run_again(
    redis_url: str, key_prefix: str
) -> None:
    sent = SentMessages()
    broker, _ = stream_broker(redis_url, key_prefix, sent)
    ran: list[int] = []

    @broker.task
    async def member(index: int) -> int:
        return index

    @broker.task
    async def then(result: GroupResult) -> None:
        ran.append(result.total)

    async with worker(broker, max_async_tasks=5) as receiver:
        handle = await group([Signature.of(member, 0)], then=then).kiq(broker)
        await eventually(lambda: len(ran) == 1, what="the continuation")
        await eventually(
            lambda: _state_is(handle, "completed"), what="the group to complete"
        )
        (continuation,) = sent.of_task(then.task_name)
        await sent.resend(continuation)
        await sent.resend(sent.of_task(member.task_name)[0])  # a late member, too
        await eventually(
            lambda: (
                sent.executions_of(then.task_name) == 2
                and sent.executions_of(member.task_name) == 2
            ),
            what="both redeliveries to be handled",
        )
        status = await handle.status()
        await drained(broker, receiver)

    assert ran == [1]
    assert status.state.value == "completed"


async def _state_is(handle: object, state: str) -> bool:
    status = await handle.status()  # type: ignore[attr-defined]
    return status.state.value == state


async def test_group_member_labels_carry_the_group_token(
    redis_url: str, key_prefix: str
) -> None:
    sent = SentMessages()
    broker, fanin = stream_broker(redis_url, key_prefix, sent)

    @broker.task
    async def member(index: int) -> None:
        return None

    await broker.startup()
    try:
        handle = await group(
            [Signature.of(member, i) for i in range(3)], group_id="album-7"
        ).kiq(broker)
        refs = [MemberRef.from_labels(m.labels) for m in sent.sent]
        token = await fanin.context.redis.hget(
            GroupKeys(key_prefix, "album-7").meta, "token"
        )
    finally:
        await broker.shutdown()

    assert handle.group_id == "album-7"
    assert sorted(r.index for r in refs if r) == [0, 1, 2]  # kicked concurrently
    assert {r.token for r in refs if r} == {token.decode()}
    assert sorted(m.task_id for m in sent.sent) == [
        "album-7~0",
        "album-7~1",
        "album-7~2",
    ]


async def test_two_copies_of_a_continuation_in_flight_run_its_body_once(
    redis_url: str,
    redis_client: Redis,
    key_prefix: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The copy finds the run lease held: it does not run, and stays
    unacknowledged (should the first copy's worker die, it comes back and runs;
    once the first completed, it comes back and is skipped)."""
    caplog.set_level(logging.INFO, logger="taskiq_fanin")
    sent = SentMessages()
    broker, _ = stream_broker(redis_url, key_prefix, sent)
    release = asyncio.Event()
    bodies: list[int] = []

    @broker.task
    async def member(index: int) -> int:
        return index

    @broker.task
    async def then(result: GroupResult) -> None:
        bodies.append(result.total)
        await release.wait()

    async with worker(broker, max_async_tasks=5) as receiver:
        handle = await group([Signature.of(member, 0)], then=then).kiq(broker)
        await eventually(lambda: len(bodies) == 1, what="the first copy to run")
        (continuation,) = sent.of_task(then.task_name)
        await sent.resend(continuation)  # redelivered while the first still runs
        await eventually(
            lambda: "running elsewhere" in caplog.text, what="the copy to be refused"
        )
        release.set()
        await eventually(
            lambda: sent.executions_of(then.task_name) == 1, what="the first to end"
        )
        status = await handle.status()
        await drained(broker, receiver, abandoned=1)  # the copy, to come back
        pending = await redis_client.xpending(f"{key_prefix}:stream", "taskiq")

    assert bodies == [1]
    assert status.state.value == "completed"
    assert pending["pending"] == 1  # the copy: unacknowledged, to come back


async def test_a_continuation_that_fails_once_runs_again_on_its_retry(
    redis_url: str, key_prefix: str
) -> None:
    broker, _ = stream_broker(
        redis_url, key_prefix, SimpleRetryMiddleware(default_retry_count=3)
    )
    attempts: list[int] = []

    @broker.task
    async def member(index: int) -> int:
        return index

    @broker.task(retry_on_error=True)
    async def then(result: GroupResult) -> None:
        attempts.append(result.total)
        if len(attempts) == 1:
            raise ConnectionError("transient")

    async with worker(broker, max_async_tasks=5) as receiver:
        handle = await group([Signature.of(member, 0)], then=then).kiq(broker)
        await eventually(lambda: len(attempts) == 2, what="the retry to run")
        await eventually(lambda: _completed(handle), what="the group to complete")
        await drained(broker, receiver)

    assert attempts == [1, 1]


async def _completed(handle: object) -> bool:
    status = await handle.status()  # type: ignore[attr-defined]
    return status.state.value == "completed"


async def test_a_continuation_s_failed_attempt_releases_as_the_delivery_it_began_as(
    redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The release of an attempt to be retried names the delivery its guard
    began it as (not the recording's own): only that delivery's lease is
    released, so a release applied again frees no copy begun since."""
    broker, fanin = stream_broker(
        redis_url, key_prefix, SimpleRetryMiddleware(default_retry_count=3)
    )
    attempts: list[int] = []
    began: list[tuple[int, str]] = []
    released: list[tuple[int, str]] = []

    @broker.task
    async def member(index: int) -> int:
        return index

    @broker.task(retry_on_error=True)
    async def then(result: GroupResult) -> None:
        attempts.append(result.total)
        if len(attempts) == 1:
            raise ConnectionError("transient")

    async with worker(broker, max_async_tasks=5) as receiver:
        scripts = fanin.context.scripts
        real_begin, real_release = (
            scripts.begin_continuation,
            scripts.release_continuation,
        )

        async def begin(*args: Any, **kwargs: Any) -> Any:
            began.append((kwargs["attempt"], kwargs["delivery"]))
            return await real_begin(*args, **kwargs)

        async def release(*args: Any, **kwargs: Any) -> Any:
            released.append((kwargs["attempt"], kwargs.get("delivery", "")))
            return await real_release(*args, **kwargs)

        monkeypatch.setattr(scripts, "begin_continuation", begin)
        monkeypatch.setattr(scripts, "release_continuation", release)
        handle = await group([Signature.of(member, 0)], then=then).kiq(broker)
        await eventually(lambda: len(attempts) == 2, what="the retry to run")
        await eventually(lambda: _completed(handle), what="the group to complete")
        await eventually(lambda: bool(released), what="attempt 0's release")
        await drained(broker, receiver)

    first = next(delivery for attempt, delivery in began if attempt == 0)
    assert released == [(0, first)]
    assert attempts == [1, 1]
