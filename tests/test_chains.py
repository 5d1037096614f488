"""Chains on a real redis-server and a real Receiver: no step holds a slot, each
next step is enqueued once, groups inside chains and chains inside groups, the
saga's compensations, cancellation and the nesting bound.
"""

import asyncio
import logging
from collections import Counter

import pytest
from taskiq import SimpleRetryMiddleware

from taskiq_fanin import (
    ChainFailure,
    GroupResult,
    Signature,
    cancel,
    chain,
    group,
)
from taskiq_fanin.errors import NestingTooDeepError
from taskiq_fanin.inspection import chain_status
from taskiq_fanin.models import ChainState
from taskiq_fanin.storage.keys import ChainKeys
from tests.harness import (
    DuplicatingMiddleware,
    SentMessages,
    chain_reached,
    drained,
    eventually,
    lossy_stream_broker,
    stream_broker,
    worker,
)


async def test_a_chain_of_twenty_steps_completes_with_one_slot(
    redis_url: str, key_prefix: str
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix)
    seen: list[int] = []

    @broker.task
    async def add_one(value: int) -> int:
        seen.append(value)
        return value + 1

    async with worker(broker, max_async_tasks=1) as receiver:
        steps = [Signature.of(add_one, 0), *[Signature.of(add_one)] * 19]
        handle = await chain(*steps).kiq(broker)
        await eventually(
            lambda: _chain_state(handle, ChainState.DONE), what="the chain to end"
        )
        status = await handle.status()
        await drained(broker, receiver)

    assert seen == list(range(20))
    assert (status.step, status.steps) == (20, 20)


async def test_a_group_in_the_middle_of_a_chain_completes_with_one_slot(
    redis_url: str, key_prefix: str
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix)
    finished: list[tuple[int, list[int]]] = []

    @broker.task
    async def probe(video: str) -> int:
        return len(video)

    @broker.task
    async def transcode(size: int, rendition: int) -> int:
        await asyncio.sleep(0.01)
        return size * rendition

    @broker.task
    async def notify(result: GroupResult, tag: str) -> None:
        finished.append((len(tag), result.results))

    async with worker(broker, max_async_tasks=1) as receiver:
        handle = await chain(
            Signature.of(probe, "video"),
            group([Signature.of(transcode, r) for r in range(5)]),
            Signature.of(notify, "done"),
        ).kiq(broker)
        await eventually(lambda: len(finished) == 1, what="notify")
        await eventually(lambda: _chain_state(handle, ChainState.DONE), what="done")
        await drained(broker, receiver)

    # Each transcode took probe's result (5) first, as any next step would.
    assert finished == [(4, [0, 5, 10, 15, 20])]


async def test_the_group_step_passes_the_previous_result_to_its_members(
    redis_url: str, key_prefix: str
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix)
    results: list[list[int]] = []

    @broker.task
    async def first() -> int:
        return 3

    @broker.task
    async def times(previous: int, factor: int) -> int:
        return previous * factor

    @broker.task
    async def alone(factor: int) -> int:
        return factor

    @broker.task
    async def twice(previous: int) -> int:
        return previous * 2

    @broker.task
    async def collect(result: GroupResult) -> None:
        results.append(result.results)

    async with worker(broker, max_async_tasks=2) as receiver:
        await chain(
            Signature.of(first),
            group(
                [
                    Signature.of(times, 10),
                    Signature.of(times, 100),
                    Signature.of(alone, 7).immutable(),  # opts out
                    chain(Signature.of(twice), Signature.of(twice)),  # its first step
                ]
            ),
            Signature.of(collect),
        ).kiq(broker)
        await eventually(lambda: len(results) == 1, what="collect")
        await drained(broker, receiver)

    # As Celery's chain into a group: each member takes the previous result first.
    assert results == [[30, 300, 7, 12]]


async def test_a_step_delivered_twice_enqueues_its_next_step_once(
    redis_url: str, key_prefix: str
) -> None:
    twice = DuplicatingMiddleware(lambda m: m.task_id.endswith("~1"))
    sent = SentMessages()
    broker, _ = stream_broker(redis_url, key_prefix, twice, sent)
    runs: Counter[str] = Counter()

    @broker.task
    async def step(name: str, previous: object = None) -> str:
        runs[name] += 1
        return name

    # One slot: the copy runs after the first ended, and finds the step done.
    # (Delivered while the first still finishes, it would be refused and left
    # unacknowledged, its lease held: the guard tests cover that; taskiq-redis
    # then reclaims it only once the stream has new messages.)
    async with worker(broker, max_async_tasks=1) as receiver:
        handle = await chain(
            Signature.of(step, "a"),
            Signature.of(step, "b").immutable(),
            Signature.of(step, "c").immutable(),
            Signature.of(step, "d").immutable(),
        ).kiq(broker)
        await eventually(lambda: _chain_state(handle, ChainState.DONE), what="done")
        await eventually(
            lambda: sent.executions_of(step.task_name) == 5, what="the duplicate"
        )
        await drained(broker, receiver)

    assert len(twice.duplicated) == 1
    assert runs["c"] == 1
    assert runs["d"] == 1


async def test_a_step_that_comes_back_after_its_next_kick_was_lost_kicks_it_again(
    redis_url: str, key_prefix: str
) -> None:
    """The advance landed and the next step's kick did not (Redis away between
    the two for longer than the hook's ``retry_for``): the step's message comes
    back, and its copy kicks the next step again rather than leave the chain
    to the sweep, once the advance is a lease old; a copy sooner (a duplicate,
    the kick still on its way) kicks nothing."""
    sent = SentMessages()
    broker, fanin = lossy_stream_broker(redis_url, key_prefix, sent)
    ran: list[str] = []

    @broker.task
    async def probe(video: str) -> str:
        ran.append(f"probe {video}")
        return f"{video}.meta"

    @broker.task
    async def transcode(meta: str) -> None:
        ran.append(f"transcode {meta}")

    keys = ChainKeys(key_prefix, "video")
    async with worker(broker, max_async_tasks=2) as receiver:
        broker.drop = {"video~1"}  # the advance's kick, lost
        handle = await chain(
            Signature.of(probe, "cat"), Signature.of(transcode), chain_id="video"
        ).kiq(broker)
        await eventually(lambda: _at_step(handle, 1), what="the advance")
        await drained(broker, receiver)
        (first,) = sent.of_task(probe.task_name)
        await sent.resend(first)  # within the lease
        await drained(broker, receiver)
        kicked_sooner = len(sent.of_task(transcode.task_name))
        # The advance a lease old, on Redis's clock (the record's 'updated').
        seconds, micros = await fanin.context.redis.time()
        lease_ms = int(fanin.context.config.finaliser_lease * 1000)
        long_ago = seconds * 1000 + micros // 1000 - lease_ms
        await fanin.context.redis.hset(keys.record, "updated", long_ago)
        await sent.resend(first)  # the message coming back
        await eventually(lambda: _chain_state(handle, ChainState.DONE), what="done")
        await drained(broker, receiver)

    assert kicked_sooner == 1  # the lost kick only
    assert len(sent.of_task(transcode.task_name)) == 2
    assert ran == ["probe cat", "transcode cat.meta"]


async def test_a_step_that_comes_back_while_its_group_step_runs_plans_nothing(
    redis_url: str, key_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The next step is a group, planned and running past a lease: a copy of
    the step before it that comes back plans nothing again (a group step
    begins no run lease; its group's meta says it was planned)."""
    caplog.set_level(logging.INFO, logger="taskiq_fanin")
    sent = SentMessages()
    broker, fanin = stream_broker(redis_url, key_prefix, sent)
    release = asyncio.Event()
    started: list[int] = []

    @broker.task
    async def probe(video: str) -> int:
        return 2

    @broker.task
    async def encode(size: int, rendition: int) -> int:
        started.append(rendition)
        await release.wait()
        return size * rendition

    @broker.task
    async def publish(result: GroupResult) -> None: ...

    keys = ChainKeys(key_prefix, "film")
    async with worker(broker, max_async_tasks=4) as receiver:
        handle = await chain(
            Signature.of(probe, "cat"),
            group([Signature.of(encode, r) for r in range(2)]),
            Signature.of(publish),
            chain_id="film",
        ).kiq(broker)
        await eventually(lambda: len(started) == 2, what="the group step to run")
        seconds, micros = await fanin.context.redis.time()
        lease_ms = int(fanin.context.config.finaliser_lease * 1000)
        long_ago = seconds * 1000 + micros // 1000 - lease_ms
        await fanin.context.redis.hset(keys.record, "updated", long_ago)
        (first,) = sent.of_task(probe.task_name)
        await sent.resend(first)  # the step before the group, coming back
        await eventually(
            lambda: sent.executions_of(probe.task_name) == 2, what="the copy"
        )
        release.set()
        await eventually(lambda: _chain_state(handle, ChainState.DONE), what="done")
        await drained(broker, receiver)

    assert len(sent.of_task(encode.task_name)) == 2  # each member kicked once
    assert started == [0, 1]
    assert not [r for r in caplog.records if "kick was lost" in r.message]


async def test_a_step_retried_after_a_failure_enqueues_its_next_step_once(
    redis_url: str, key_prefix: str
) -> None:
    broker, _ = stream_broker(
        redis_url, key_prefix, SimpleRetryMiddleware(default_retry_count=3)
    )
    attempts: Counter[str] = Counter()
    ends: list[str] = []

    @broker.task(retry_on_error=True)
    async def flaky(value: str) -> str:
        attempts[value] += 1
        if attempts[value] == 1:
            raise ConnectionError("transient")
        return value + "!"

    @broker.task
    async def last(value: str) -> None:
        ends.append(value)

    async with worker(broker, max_async_tasks=2) as receiver:
        handle = await chain(Signature.of(flaky, "x"), Signature.of(last)).kiq(broker)
        await eventually(lambda: _chain_state(handle, ChainState.DONE), what="done")
        await drained(broker, receiver)

    assert attempts["x"] == 2
    assert ends == ["x!"]


async def test_a_group_of_three_step_chains_continues_once_after_every_chain(
    redis_url: str, key_prefix: str
) -> None:
    sent = SentMessages()
    broker, fanin = stream_broker(redis_url, key_prefix, sent)
    continued: list[GroupResult] = []

    @broker.task
    async def start(n: int) -> int:
        return n

    @broker.task
    async def double(n: int) -> int:
        await asyncio.sleep(0.01 * (n % 3))
        return n * 2

    @broker.task
    async def then(result: GroupResult) -> None:
        continued.append(result)

    async def chains_done(group_id: str) -> bool:
        chains_now = [await chain_status(fanin, f"{group_id}~{i}") for i in range(6)]
        return {c.state for c in chains_now} == {ChainState.DONE}

    async with worker(broker, max_async_tasks=4) as receiver:
        members = [
            chain(Signature.of(start, i), Signature.of(double), Signature.of(double))
            for i in range(6)
        ]
        handle = await group(members, then=then).kiq(broker)
        await eventually(lambda: len(continued) == 1, what="the continuation")
        await eventually(
            lambda: sent.executions_of(then.task_name) == 1, what="its completion"
        )
        # A chain's last step records the member before it closes the chain's
        # own record (a crash in between redelivers the step, which records
        # nothing twice), so the records may close just after the continuation.
        await eventually(lambda: chains_done(handle.group_id), what="every chain")
        await drained(broker, receiver)

    (result,) = continued
    assert result.results == [i * 4 for i in range(6)]
    assert result.failed == {}


async def test_a_terminal_failure_at_step_three_compensates_steps_two_and_one(
    redis_url: str, key_prefix: str
) -> None:
    sent = SentMessages()
    broker, fanin = stream_broker(redis_url, key_prefix, sent)
    journal: list[str] = []
    failures: list[ChainFailure] = []

    @broker.task
    async def do(name: str) -> str:
        journal.append(f"do {name}")
        if name == "3":
            raise RuntimeError("transcoder crashed")
        return name

    @broker.task
    async def undo(name: str) -> None:
        journal.append(f"undo {name}")

    @broker.task
    async def on_error(failure: ChainFailure) -> None:
        failures.append(failure)

    async with worker(broker, max_async_tasks=4) as receiver:
        steps = [
            Signature.of(do, name)
            .immutable()
            .with_compensation(Signature.of(undo, name))
            for name in ("1", "2", "3", "4")
        ]
        handle = await chain(*steps, on_error=on_error).kiq(broker)
        await eventually(lambda: journal[-2:] == ["undo 2", "undo 1"], what="undo")
        await eventually(lambda: len(failures) == 1, what="the error continuation")
        await eventually(
            lambda: chain_reached(fanin, f"{handle.chain_id}~undo", ChainState.DONE),
            what="the compensations to end",
        )
        await eventually(
            lambda: chain_reached(fanin, handle.chain_id, ChainState.FAILED),
            what="the chain to be failed",
        )
        status = await handle.status()
        await drained(broker, receiver)

    assert journal == ["do 1", "do 2", "do 3", "undo 2", "undo 1"]
    assert (failures[0].step, failures[0].step_name) == (2, do.task_name)
    assert failures[0].error.message == "transcoder crashed"
    assert (status.state, status.failed_step) == (ChainState.FAILED, 2)
    assert status.error is not None
    assert (status.error.type, status.error.message) == (
        "RuntimeError",
        "transcoder crashed",
    )


async def test_cancelling_mid_chain_stops_later_steps(
    redis_url: str, key_prefix: str
) -> None:
    sent = SentMessages()
    broker, fanin = stream_broker(redis_url, key_prefix, sent)
    journal: list[str] = []
    release = asyncio.Event()

    @broker.task
    async def step(name: str) -> str:
        journal.append(name)
        if name == "2":
            await release.wait()
        return name

    @broker.task
    async def undo(name: str) -> None:
        journal.append(f"undo {name}")

    async with worker(broker, max_async_tasks=2) as receiver:
        handle = await chain(
            *[
                Signature.of(step, n)
                .immutable()
                .with_compensation(Signature.of(undo, n))
                for n in ("1", "2", "3")
            ]
        ).kiq(broker)
        await eventually(lambda: "2" in journal, what="step 2 to start")
        assert await cancel(broker, handle.chain_id)
        assert not await cancel(broker, handle.chain_id)  # once
        release.set()
        await eventually(
            lambda: sent.executions_of(step.task_name) == 2, what="step 2 to end"
        )
        for undo_id in (f"{handle.chain_id}~undo", f"{handle.chain_id}~undo1"):
            await eventually(
                lambda undo_id=undo_id: chain_reached(fanin, undo_id, ChainState.DONE),
                what="the compensations to end",
            )
        status = await handle.status()
        await drained(broker, receiver)

    # Step 2 was running when the chain was cancelled: it finishes, nothing after
    # it is enqueued, and both step 1 (completed) and step 2 are undone.
    assert [
        m.task_id for m in sent.sent if m.task_id.startswith(handle.chain_id + "~")
    ][:2] == [f"{handle.chain_id}~0", f"{handle.chain_id}~1"]
    assert f"{handle.chain_id}~2" not in {m.task_id for m in sent.sent}
    assert journal[:2] == ["1", "2"]
    assert sorted(journal[2:]) == ["undo 1", "undo 2"]
    assert status.state is ChainState.CANCELLED


async def test_steps_and_members_not_yet_started_see_the_cancel_flag(
    redis_url: str, key_prefix: str
) -> None:
    sent = SentMessages()
    broker, _fanin = stream_broker(redis_url, key_prefix, sent)
    ran: list[str] = []
    release = asyncio.Event()

    @broker.task
    async def blocker() -> None:
        await release.wait()

    @broker.task
    async def work(name: str) -> None:
        ran.append(name)

    @broker.task
    async def then(result: GroupResult) -> None:
        ran.append("then")

    async with worker(broker, max_async_tasks=1) as receiver:
        await blocker.kiq()  # holds the only slot: what follows waits in the queue
        queued_chain = await chain(Signature.of(work, "step")).kiq(broker)
        queued_group = await group(
            [Signature.of(work, "member")], then=then, cancellable=True
        ).kiq(broker)
        assert await cancel(broker, queued_chain.chain_id)
        assert await cancel(broker, queued_group.group_id)
        release.set()
        await eventually(
            lambda: sent.executions_of(work.task_name) == 2, what="both to be handled"
        )
        group_status = await queued_group.status()
        queued_status = await queued_chain.status()
        await drained(broker, receiver)

    assert ran == []
    assert group_status.state.value == "cancelled"
    assert queued_status.state is ChainState.CANCELLED


async def test_nesting_past_the_bound_fails_with_a_typed_error_and_spawns_nothing(
    redis_url: str, key_prefix: str
) -> None:
    sent = SentMessages()
    broker, fanin = stream_broker(redis_url, key_prefix, sent, max_depth=2)

    @broker.task
    async def leaf(n: int) -> int:
        return n

    await broker.startup()
    try:
        nested = chain(Signature.of(leaf, 1), group([chain(Signature.of(leaf, 2))]))
        with pytest.raises(NestingTooDeepError):
            await nested.kiq(broker)
        keys = await fanin.context.redis.keys(f"{key_prefix}*")
    finally:
        await broker.shutdown()

    assert sent.sent == []
    assert [k for k in keys if not k.endswith(b":stream")] == []


async def _at_step(handle: object, step: int) -> bool:
    return (await handle.status()).step == step  # type: ignore[attr-defined]


async def _chain_state(handle: object, state: ChainState) -> bool:
    return (await handle.status()).state is state  # type: ignore[attr-defined]


async def test_a_cancelled_chain_member_fails_its_member_and_the_group_ends(
    redis_url: str, key_prefix: str
) -> None:
    broker, fanin = stream_broker(redis_url, key_prefix)
    release = asyncio.Event()
    results: list[GroupResult] = []

    @broker.task
    async def slow(n: int) -> int:
        if n == 1:
            await release.wait()
        return n

    @broker.task
    async def then(result: GroupResult) -> None:
        results.append(result)

    async with worker(broker, max_async_tasks=4) as receiver:
        members = [chain(Signature.of(slow, n), Signature.of(slow)) for n in range(2)]
        handle = await group(members, then=then, group_id="g").kiq(broker)
        await eventually(
            lambda: chain_reached(fanin, "g~0", ChainState.DONE), what="chain 0"
        )
        assert await cancel(broker, "g~1")  # its first step is running
        release.set()
        await eventually(lambda: len(results) == 1, what="the continuation")
        status = await handle.status()
        await drained(broker, receiver)

    (result,) = results
    assert result.succeeded == [0]
    assert result.failed[1].type == "ChainCancelledError"
    assert status.done == 1
