"""Statuses that tell the truth, on a real redis-server and a real Receiver: a
cancelled group counts the members that ran anyway, a finished group or chain
keeps its finish time (and its age stops there), and a chain failed by a group
step names each failed member's error.
"""

import asyncio
from datetime import timedelta

from redis.asyncio import Redis
from taskiq import AsyncBroker

from taskiq_fanin import (
    ChainFailure,
    GroupResult,
    GroupStatus,
    MemberError,
    Signature,
    cancel,
    chain,
    group,
    status,
)
from taskiq_fanin.chains.tasks import step_error_payload as error_payload
from taskiq_fanin.domain.exceptions import GroupStepFailedError
from taskiq_fanin.domain.results import MEMBERS_KEPT, StepError, from_millis
from taskiq_fanin.groups.reading import status_from_meta
from taskiq_fanin.models import ChainState, GroupState
from taskiq_fanin.storage.keys import ChainKeys, GroupKeys
from taskiq_fanin.storage.records import GroupMeta
from tests.harness import (
    SentMessages,
    chain_reached,
    drained,
    eventually,
    stream_broker,
    worker,
)


async def test_a_cancelled_group_counts_the_members_that_ran_anyway(
    redis_url: str, key_prefix: str
) -> None:
    sent = SentMessages()
    broker, _ = stream_broker(redis_url, key_prefix, sent)
    release = asyncio.Event()
    started: list[int] = []
    continued: list[GroupResult] = []

    @broker.task
    async def member(index: int) -> int:
        started.append(index)
        await release.wait()
        if index == 2:
            raise RuntimeError("member 2 broke")
        return index

    @broker.task
    async def then(result: GroupResult) -> None:
        continued.append(result)

    async with worker(broker, max_async_tasks=4) as receiver:
        handle = await group(
            [Signature.of(member, i) for i in range(3)], then=then, on_error=then
        ).kiq(broker)
        await eventually(lambda: len(started) == 3, what="the members to start")
        assert await cancel(broker, handle.group_id)
        release.set()
        await eventually(
            lambda: sent.executions_of(member.task_name) == 3,
            what="the members to end",
        )
        await eventually(
            lambda: _pending_is(broker, handle.group_id, 0),
            timeout=5,
            what="every member to be counted",
        )
        found = await status(broker, handle.group_id)
        await drained(broker, receiver)

    assert found.state is GroupState.CANCELLED
    assert (found.done, found.failed, found.pending) == (2, 1, 0)
    assert continued == []
    assert sent.executions_of(then.task_name) == 0


async def _pending_is(broker: AsyncBroker, group_id: str, pending: int) -> bool:
    found = await status(broker, group_id)
    return isinstance(found, GroupStatus) and found.pending == pending


async def test_a_finished_group_keeps_its_finish_time_and_stops_ageing(
    redis_url: str, redis_client: Redis, key_prefix: str
) -> None:
    sent = SentMessages()
    broker, _ = stream_broker(redis_url, key_prefix, sent)
    release = asyncio.Event()

    @broker.task
    async def member(index: int) -> int:
        if index < 0:
            await release.wait()
        return index

    @broker.task
    async def then(result: GroupResult) -> None: ...

    async with worker(broker, max_async_tasks=4):
        ended = await group([Signature.of(member, i) for i in range(2)], then=then).kiq(
            broker
        )
        blocked = await group([Signature.of(member, -1)], then=then).kiq(broker)
        await eventually(
            lambda: _state_is(broker, ended.group_id, GroupState.COMPLETED),
            what="the group to complete",
        )
        running = await blocked.status()
        assert await cancel(broker, blocked.group_id)
        release.set()
        await eventually(
            lambda: sent.executions_of(member.task_name) == 3, what="every member"
        )
        completed = await ended.status()
        cancelled = await blocked.status()
        metas = [
            await redis_client.hgetall(GroupKeys(key_prefix, handle.group_id).meta)
            for handle in (ended, blocked)
        ]

    # Still open: no finish time, and the age goes by the clock.
    assert running.finished is None
    assert running.created is not None
    assert running.read_at is not None
    later = running.read_at + timedelta(hours=1)
    assert running.age_seconds(later) == (later - running.created).total_seconds()
    # Finished: the meta's own time of the end, and an age that stops there.
    assert completed.finished == from_millis(int(metas[0][b"completed_at"]))
    assert cancelled.finished == from_millis(int(metas[1][b"cancelled_at"]))
    for found in (completed, cancelled):
        assert found.created is not None
        assert found.finished is not None
        assert found.read_at is not None
        assert found.created <= found.finished <= found.read_at
        age = (found.finished - found.created).total_seconds()
        assert found.age_seconds() == age
        assert found.age_seconds(found.read_at + timedelta(hours=1)) == age


def test_a_group_meta_written_before_finish_times_reads_with_none() -> None:
    meta = {
        "state": "completed",
        "total": "1",
        "done_count": "1",
        "failed_count": "0",
        "policy": "continue",
        "sweep": "report",
        "created": "1000",
        "deadline": "61000",
    }
    read_at = from_millis(5000)
    found = status_from_meta("old", GroupMeta.from_hash(meta), read_at=read_at)
    assert found.finished is None
    assert found.age_seconds() == 4.0


async def test_a_finished_chain_keeps_its_finish_time_and_stops_ageing(
    redis_url: str, redis_client: Redis, key_prefix: str
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix)
    release = asyncio.Event()

    @broker.task
    async def step(value: int) -> int:
        if value < 0:
            await release.wait()
        if value == 13:
            raise RuntimeError("unlucky")
        return value + 1

    async with worker(broker, max_async_tasks=4):
        done = await chain(Signature.of(step, 1), Signature.of(step)).kiq(broker)
        failed = await chain(Signature.of(step, 13), Signature.of(step)).kiq(broker)
        blocked = await chain(Signature.of(step, -1), Signature.of(step)).kiq(broker)
        for handle, state in ((done, ChainState.DONE), (failed, ChainState.FAILED)):
            await eventually(
                lambda h=handle, s=state: chain_reached(broker, h.chain_id, s),
                what=f"the chain to be {state.value}",
            )
        running = await blocked.status()
        assert await cancel(broker, blocked.chain_id)
        release.set()
        ended = [await handle.status() for handle in (done, failed, blocked)]
        record = ChainKeys(key_prefix, done.chain_id).record
        await redis_client.hdel(record, "finished")  # as a record from before
        old = await done.status()

    assert running.finished is None
    assert running.started is not None
    assert running.read_at is not None
    later = running.read_at + timedelta(hours=1)
    assert running.age_seconds(later) == (later - running.started).total_seconds()
    assert [found.state for found in ended] == [
        ChainState.DONE,
        ChainState.FAILED,
        ChainState.CANCELLED,
    ]
    for found in ended:
        assert found.started is not None
        assert found.finished is not None
        assert found.read_at is not None
        assert found.started <= found.finished <= found.read_at
        age = (found.finished - found.started).total_seconds()
        assert found.age_seconds() == age
        assert found.age_seconds(found.read_at + timedelta(hours=1)) == age
    assert old.state is ChainState.DONE
    assert old.finished is None


async def _state_is(broker: AsyncBroker, group_id: str, state: GroupState) -> bool:
    return (await status(broker, group_id)).state is state


async def test_a_chain_failed_by_its_group_step_names_each_failed_member(
    redis_url: str, key_prefix: str
) -> None:
    sent = SentMessages()
    broker, _ = stream_broker(redis_url, key_prefix, sent)
    failures: list[ChainFailure] = []

    @broker.task
    async def probe(video: str) -> int:
        return len(video)

    @broker.task
    async def transcode(size: int, rendition: str) -> str:
        if rendition == "720p":
            raise ValueError("bad frame at 00:42")
        if rendition == "480p":
            raise KeyError("codec")
        return f"{size}@{rendition}"

    @broker.task
    async def publish(result: GroupResult) -> None: ...

    @broker.task
    async def report(failure: ChainFailure, video: str) -> None:
        failures.append(failure)

    async with worker(broker, max_async_tasks=4) as receiver:
        handle = await chain(
            Signature.of(probe, "video"),
            group(
                [Signature.of(transcode, r) for r in ("1080p", "720p", "480p")],
                failure_policy="fail",
            ),
            Signature.of(publish),
            on_error=Signature.of(report, "video"),
        ).kiq(broker)
        await eventually(lambda: len(failures) == 1, what="the error continuation")
        await eventually(
            lambda: chain_reached(broker, handle.chain_id, ChainState.FAILED),
            what="the chain to fail",
        )
        found = await handle.status()
        await drained(broker, receiver)

    failure = failures[0]
    assert failure.step == 1
    assert failure.error.type == "GroupStepFailedError"
    assert failure.members == {
        1: MemberError(type="ValueError", message="bad frame at 00:42"),
        2: MemberError(type="KeyError", message="'codec'"),
    }
    assert failure.lost == []
    assert found.failed_step == 1
    assert found.failed_members == failure.members
    assert found.lost_members == []
    assert sent.executions_of(publish.task_name) == 0


async def test_a_task_step_failure_names_no_members(
    redis_url: str, key_prefix: str
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix)
    failures: list[ChainFailure] = []

    @broker.task
    async def boom() -> None:
        raise RuntimeError("no")

    @broker.task
    async def report(failure: ChainFailure) -> None:
        failures.append(failure)

    async with worker(broker, max_async_tasks=2):
        handle = await chain(Signature.of(boom), on_error=report).kiq(broker)
        await eventually(lambda: len(failures) == 1, what="the error continuation")
        await eventually(
            lambda: chain_reached(broker, handle.chain_id, ChainState.FAILED),
            what="the chain to fail",
        )
        found = await handle.status()

    assert (failures[0].error.type, failures[0].error.message) == ("RuntimeError", "no")
    assert (failures[0].members, failures[0].lost) == ({}, [])
    assert (found.failed_members, found.lost_members) == ({}, [])


def test_a_group_step_error_keeps_a_bounded_number_of_member_errors() -> None:
    limit = 10_000
    error = GroupStepFailedError(
        group_id="g",
        total=500,
        failed=300,
        lost=200,
        details="; member 0: ...",
        member_errors=tuple(
            (index, "ValueError", "x" * limit) for index in reversed(range(300))
        ),
        lost_members=tuple(range(300, 500)),
    )
    payload = error_payload(error, limit)
    kept = StepError.model_validate_json(payload)

    assert list(kept.members) == list(range(MEMBERS_KEPT))  # the lowest indexes
    assert {len(e.message) for e in kept.members.values()} == {limit // MEMBERS_KEPT}
    assert kept.lost == list(range(300, 300 + MEMBERS_KEPT))
    assert len(payload) < 2 * limit + 100 * MEMBERS_KEPT
    # A plain error keeps the shape it always had.
    assert error_payload(RuntimeError("no"), limit) == (
        '{"type":"RuntimeError","message":"no"}'
    )
