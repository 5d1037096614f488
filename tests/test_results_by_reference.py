"""Results by reference: a group over ``results_inline_max`` hands its
continuation counts, and the continuation reads its results from Redis in
pages, in member order; real redis-server, real Receiver.
"""

import asyncio
import json
import time
from typing import Any

import pytest
from redis.asyncio import Redis

from taskiq_fanin import ChainFailure, GroupResult, MemberError, Signature, chain, group
from taskiq_fanin.domain.group_result import ResultsReference
from taskiq_fanin.errors import GroupResultsExpiredError, MiddlewareNotFoundError
from taskiq_fanin.storage.keys import GroupKeys
from taskiq_fanin.storage.scripts import Scripts
from taskiq_fanin.transport.pipeline import PipelineBatcher
from tests.harness import SentMessages, drained, eventually, stream_broker, worker

#: Smaller than the groups below, so that reading them crosses pages.
PAGE = 4


def _fails(index: int) -> bool:
    return index % 7 == 3


Read = tuple[GroupResult, list[tuple[int, Any]], list[tuple[int, MemberError]]]


def _app(broker: Any, read: list[Read]) -> tuple[Any, Any]:
    @broker.task
    async def square(index: int) -> int:
        if _fails(index):
            raise ValueError(f"no {index}")
        return index * index

    # The same continuation for a group of any size.
    @broker.task
    async def gather(result: GroupResult) -> None:
        results = [item async for item in result.iter_results(page_size=PAGE)]
        failures = [item async for item in result.iter_failures(page_size=PAGE)]
        read.append((result, results, failures))

    return square, gather


def _expected(n: int) -> tuple[list[tuple[int, int]], list[tuple[int, str]]]:
    results = [(i, i * i) for i in range(n) if not _fails(i)]
    failures = [(i, f"no {i}") for i in range(n) if _fails(i)]
    return results, failures


@pytest.mark.parametrize("inline_max", [5, 1000])
async def test_the_same_continuation_reads_every_result_and_failure_in_member_order(
    redis_url: str, key_prefix: str, inline_max: int
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix, results_inline_max=inline_max)
    read: list[Read] = []
    square, gather = _app(broker, read)
    members = 30

    async with worker(broker, max_async_tasks=10) as receiver:
        await group([Signature.of(square, i) for i in range(members)], then=gather).kiq(
            broker
        )
        await eventually(lambda: bool(read), what="the continuation")
        await drained(broker, receiver)

    [(result, results, failures)] = read
    want_results, want_failures = _expected(members)
    assert results == want_results
    assert [(i, e.message) for i, e in failures] == want_failures
    assert {e.type for _, e in failures} == {"ValueError"}
    assert result.by_reference is (members > inline_max)
    assert (result.done_count, result.failed_count) == (26, 4)
    if result.by_reference:
        # Counts only travel: nothing per member is in the message.
        assert (result.succeeded, result.results, result.failed) == ([], [], {})
    else:
        assert result.results == [value for _, value in want_results]


async def test_the_continuation_message_does_not_grow_with_the_group(
    redis_url: str, key_prefix: str
) -> None:
    sent = SentMessages()
    broker, _ = stream_broker(redis_url, key_prefix, sent, results_inline_max=5)
    read: list[Read] = []
    square, gather = _app(broker, read)

    async with worker(broker, max_async_tasks=50) as receiver:
        for runs, members in enumerate((30, 300), start=1):
            await group(
                [Signature.of(square, i) for i in range(members)], then=gather
            ).kiq(broker)
            await eventually(lambda n=runs: len(read) == n, what=f"{members} members")
        await drained(broker, receiver)

    sizes = [
        len(broker.formatter.dumps(message).message)
        for message in sent.of_task(gather.task_name)
    ]
    assert len(sizes) == 2
    # The counts gain a digit or two; the group's id and token are the same size.
    assert abs(sizes[1] - sizes[0]) <= 8, sizes
    assert max(sizes) < 1024
    assert [results for _, results, _ in read] == [_expected(30)[0], _expected(300)[0]]


async def test_a_chain_hands_a_by_reference_group_step_to_its_next_step(
    redis_url: str, key_prefix: str
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix, results_inline_max=5)
    read: list[Read] = []
    square, gather = _app(broker, read)

    async with worker(broker, max_async_tasks=10) as receiver:
        members = group([Signature.of(square, i) for i in range(20)])
        await chain(members, Signature.of(gather)).kiq(broker)
        await eventually(lambda: bool(read), what="the next step")
        await drained(broker, receiver)

    [(result, results, failures)] = read
    want_results, want_failures = _expected(20)
    assert result.by_reference
    assert results == want_results
    assert [(i, e.message) for i, e in failures] == want_failures


async def test_a_chain_whose_by_reference_group_step_fails_names_its_members(
    redis_url: str, key_prefix: str
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix, results_inline_max=5)
    read: list[Read] = []
    square, _ = _app(broker, read)
    failed: list[Any] = []

    @broker.task
    async def never(result: GroupResult) -> None:
        raise AssertionError("the chain should have failed")

    @broker.task
    async def on_error(failure: ChainFailure) -> None:
        failed.append(failure)

    async with worker(broker, max_async_tasks=10) as receiver:
        await chain(
            group([Signature.of(square, i) for i in range(20)], failure_policy="fail"),
            Signature.of(never),
            on_error=on_error,
        ).kiq(broker)
        await eventually(lambda: bool(failed), what="the chain's on_error")
        await drained(broker, receiver)

    [failure] = failed
    failing = [i for i in range(20) if _fails(i)]
    assert sorted(failure.members) == failing
    assert [failure.members[i].message for i in failing] == [f"no {i}" for i in failing]


async def test_the_claim_of_a_by_reference_group_reads_no_outcome(
    redis_client: Redis, key_prefix: str
) -> None:
    pipeline = PipelineBatcher(redis_client)
    scripts = Scripts(redis_client, pipeline)
    keys = GroupKeys(key_prefix, "big")
    members = 50
    ttl_ms = 600_000
    options = ["span", 60_000, "ttl", ttl_ms, "inline_max", 10, "policy", "continue"]
    await scripts["createGroup"](
        keys=[keys.meta, keys.plan, keys.claim, f"{key_prefix}:{{big}}:chain"],
        args=["tok", 60_000, "me", len(options) // 2, *options, members]
        + ["{}"] * members,
    )
    # Shorten the group's life to 5 s, as time would: the claim must push it
    # out to a whole ttl (the outcomes' keys expire with the meta's 'expires').
    seconds, micros = await redis_client.time()
    await redis_client.hset(
        keys.meta, "expires", seconds * 1000 + micros // 1000 + 5000
    )
    await redis_client.pexpire(keys.meta, 5000)
    recording = [
        keys.meta,
        keys.done,
        keys.failed,
        keys.results,
        keys.errors,
        keys.claim,
    ]
    for index in range(members - 1):
        outcome = "failed" if _fails(index) else "done"
        payload = json.dumps({"type": "E", "message": "m"} if _fails(index) else index)
        await scripts["recordOutcome"](
            keys=recording, args=["tok", 60_000, "me", 0, index, outcome, payload, "d"]
        )
    last = members - 1
    codes, collected, outstanding = await scripts["recordOutcome"](
        keys=recording, args=["tok", 60_000, "me", 0, last, "done", str(last), "d"]
    )

    assert codes == [2]  # Recorded.CLAIMED
    assert outstanding == 0
    _, by_reference, done, failed, lost, lost_list, *per_member = collected
    assert (by_reference, done, failed, lost) == (1, 43, 7, 0)
    assert lost_list == []
    assert per_member == [[], [], [], []]
    for key in (keys.meta, keys.done, keys.failed, keys.results, keys.errors):
        assert await redis_client.pttl(key) > ttl_ms - 10_000, key
    # The sweep's read (collectOutcomes) holds no per-member data either.
    reply = await scripts["collectOutcomes"](
        keys=[keys.meta, keys.done, keys.failed, keys.results, keys.errors, keys.lost],
        args=["tok"],
    )
    assert reply[1:] == [1, 43, 7, 0, [], [], [], [], []]


async def test_results_live_past_the_groups_ttl_until_the_continuation_reads_them(
    redis_url: str, key_prefix: str
) -> None:
    # ttl 3 s; the members end after 1 s (room for a loaded machine), and the
    # continuation reads after the group's first expiry (3 s from planning):
    # the claim pushed it out.
    broker, _ = stream_broker(
        redis_url,
        key_prefix,
        results_inline_max=2,
        ttl=3.0,
        deadline=1.0,
        finaliser_lease=1.0,
    )
    planned_at: list[float] = []
    read: list[list[tuple[int, Any]]] = []

    @broker.task
    async def slow(index: int) -> int:
        await asyncio.sleep(1.0)
        return index

    @broker.task
    async def late(result: GroupResult) -> None:
        await asyncio.sleep(max(planned_at[0] + 3.3 - time.monotonic(), 0))
        read.append([item async for item in result.iter_results(page_size=2)])

    async with worker(broker, max_async_tasks=10) as receiver:
        planned_at.append(time.monotonic())
        await group([Signature.of(slow, i) for i in range(5)], then=late).kiq(broker)
        await eventually(lambda: bool(read), timeout=10, what="the late read")
        await drained(broker, receiver)

    assert read == [[(i, i) for i in range(5)]]


async def test_a_reference_read_after_its_tombstone_raises_a_typed_error(
    redis_url: str, key_prefix: str, redis_client: Redis
) -> None:
    broker, fanin = stream_broker(
        redis_url, key_prefix, results_inline_max=5, tombstone_ttl=2.0
    )
    read: list[Read] = []
    square, gather = _app(broker, read)

    async with worker(broker, max_async_tasks=10) as receiver:
        handle = await group(
            [Signature.of(square, i) for i in range(12)], then=gather
        ).kiq(broker)
        await eventually(lambda: bool(read), what="the continuation")
        await drained(broker, receiver)
        [(result, _, _)] = read
        keys = GroupKeys(key_prefix, handle.group_id)

        # Completed, the results stay for the tombstone: a reader outside a
        # worker names the broker.
        again = [item async for item in result.iter_results(broker=broker)]
        assert again == _expected(12)[0]

        async def gone() -> bool:
            return not await redis_client.exists(keys.meta, keys.results)

        await eventually(gone, what="the tombstone to expire")
        with pytest.raises(GroupResultsExpiredError) as raised:
            _ = [item async for item in result.iter_results(broker=fanin)]
        assert raised.value.group_id == handle.group_id
        with pytest.raises(GroupResultsExpiredError):
            _ = [item async for item in result.iter_failures(broker=broker)]


async def test_an_inline_result_is_read_without_redis() -> None:
    result = GroupResult(
        group_id="g",
        total=3,
        succeeded=[0, 2],
        results=["a", "c"],
        failed={1: MemberError(type="E", message="b")},
    )

    assert [item async for item in result.iter_results(page_size=1)] == [
        (0, "a"),
        (2, "c"),
    ]
    assert [item async for item in result.iter_failures()] == [
        (1, MemberError(type="E", message="b"))
    ]
    assert [index async for index in result.iter_lost()] == []


async def test_a_reference_outside_a_worker_without_a_broker_names_the_fix() -> None:
    result = GroupResult(
        group_id="g", total=9, reference=ResultsReference(token="t", done=9, failed=0)
    )

    with pytest.raises(MiddlewareNotFoundError, match="broker="):
        _ = [item async for item in result.iter_results()]
    assert (result.done_count, result.failed_count, result.ok) == (9, 0, True)
    # A round trip through JSON (the continuation's message) keeps the counts.
    assert GroupResult.model_validate_json(result.model_dump_json()) == result
