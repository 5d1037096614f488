"""Cancellation seen inside a long body, on a real redis-server and a real Receiver:
``raise_if_cancelled()`` stops a member or a step at its own safe point, is not
retried, records nothing, and costs a Redis read a second per workflow however
often it is asked.
"""

import asyncio
import math
import time
from collections import Counter

import pytest
from taskiq import SimpleRetryMiddleware

from taskiq_fanin import (
    GroupResult,
    Signature,
    cancel,
    chain,
    group,
    is_cancelled,
    raise_if_cancelled,
)
from taskiq_fanin.errors import (
    FanInError,
    NotInTaskBodyError,
    WorkflowCancelledError,
)
from taskiq_fanin.groups import continuation
from taskiq_fanin.inspection import chain_status, group_status
from taskiq_fanin.models import ChainState, GroupState
from taskiq_fanin.storage.keys import GroupKeys
from tests.harness import chain_reached, drained, eventually, stream_broker, worker

MEMBERS = 3


async def test_long_members_stop_at_raise_if_cancelled_and_are_neither_done_nor_failed(
    redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each member loops, asking at every turn; the group is cancelled while all
    run. Every member stops with ``WorkflowCancelledError``, is not retried
    (a retry middleware that retries every other error is on), is counted
    neither done nor failed, and the continuation never runs. However many
    turns they took, Redis was read about once a second (one process)."""
    retry = SimpleRetryMiddleware(default_retry_count=3)
    broker, _ = stream_broker(redis_url, key_prefix, retry)
    runs: Counter[int] = Counter()
    turns: list[int] = []
    ended: list[str] = []
    thens: list[GroupResult] = []
    reads: list[float] = []
    asked = continuation.is_cancelled

    async def counted(*args: object, **kwargs: object) -> bool:
        reads.append(time.monotonic())
        return await asked(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(continuation, "is_cancelled", counted)

    @broker.task(retry_on_error=True)
    async def transcode(index: int) -> int:
        runs[index] += 1
        turn = 0
        try:
            while True:
                turn += 1
                await raise_if_cancelled()
                await asyncio.sleep(0.005)
        except BaseException as stopped:
            ended.append(type(stopped).__name__)
            raise
        finally:
            turns.append(turn)

    @broker.task
    async def then(result: GroupResult) -> None:
        thens.append(result)

    members = [Signature.of(transcode, i) for i in range(MEMBERS)]
    async with worker(broker, max_async_tasks=MEMBERS) as receiver:
        handle = await group(members, then=then, group_id="video").kiq(broker)
        await eventually(lambda: len(runs) == MEMBERS, what="every member to run")
        started = time.monotonic()
        assert await cancel(broker, "video")
        await eventually(lambda: len(ended) == MEMBERS, what="every member to stop")
        stopped_after = time.monotonic() - started
        await drained(broker, receiver)
        status = await handle.status()
        read_for = time.monotonic() - reads[0]

    print(f"\n[cancel] members stopped {stopped_after:.2f} s after the cancel")
    assert ended == ["WorkflowCancelledError"] * MEMBERS
    assert runs == dict.fromkeys(range(MEMBERS), 1)  # not retried
    assert (status.state, status.done, status.failed) == (GroupState.CANCELLED, 0, 0)
    assert thens == []
    # At most one read a second (and one in flight), for every turn of every member.
    assert sum(turns) > 2 * len(reads)
    assert len(reads) <= math.ceil(read_for) + 1


async def test_a_long_step_stops_at_raise_if_cancelled_and_the_chain_compensates(
    redis_url: str, key_prefix: str
) -> None:
    broker, fanin = stream_broker(redis_url, key_prefix)
    journal: list[str] = []

    @broker.task
    async def fetch(name: str) -> str:
        journal.append(f"fetch {name}")
        return name

    @broker.task
    async def forget(name: str) -> None:
        journal.append(f"forget {name}")

    @broker.task
    async def encode(name: str) -> str:
        journal.append(f"encode {name}")
        while True:
            await raise_if_cancelled()
            await asyncio.sleep(0.005)

    @broker.task
    async def publish(name: str) -> None:
        journal.append(f"publish {name}")

    async with worker(broker, max_async_tasks=2) as receiver:
        handle = await chain(
            Signature.of(fetch, "clip").with_compensation(Signature.of(forget, "clip")),
            Signature.of(encode),
            Signature.of(publish),
        ).kiq(broker)
        await eventually(lambda: "encode clip" in journal, what="the long step")
        assert await cancel(broker, handle.chain_id)
        await eventually(
            lambda: chain_reached(fanin, f"{handle.chain_id}~undo", ChainState.DONE),
            what="the compensations to end",
        )
        await drained(broker, receiver)
        status = await handle.status()

    assert journal == ["fetch clip", "encode clip", "forget clip"]
    assert status.state is ChainState.CANCELLED


async def test_is_cancelled_is_false_in_a_task_of_no_workflow(
    redis_url: str, key_prefix: str
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix)
    answers: list[bool] = []

    @broker.task
    async def plain() -> None:
        answers.append(await is_cancelled())
        await raise_if_cancelled()  # returns

    async with worker(broker, max_async_tasks=1) as receiver:
        await plain.kiq()
        await eventually(lambda: answers == [False], what="the answer")
        await drained(broker, receiver)


async def test_outside_a_task_body_both_raise_a_typed_error() -> None:
    with pytest.raises(NotInTaskBodyError, match=r"is_cancelled\(\).*inside a task"):
        await is_cancelled()
    with pytest.raises(FanInError, match=r"raise_if_cancelled\(\)"):
        await raise_if_cancelled()


def test_the_cancel_error_is_one_taskiq_does_not_retry() -> None:
    from taskiq import NoResultError

    error = WorkflowCancelledError(kind="group", workflow_id="'video'")
    assert isinstance(error, NoResultError)
    assert isinstance(error, FanInError)
    assert str(error) == "The group 'video' was cancelled: the body stopped there"


@pytest.mark.parametrize(
    "half_way", [False, True], ids=["one-call", "after-a-dead-call"]
)
async def test_cancelling_a_group_of_chains_stops_every_chain(
    redis_url: str, key_prefix: str, half_way: bool
) -> None:
    """Each chain is at its long second step when the group is cancelled: no
    chain runs its third step, each undoes its first, and the group's
    continuation never runs. ``after-a-dead-call``: an earlier call cancelled
    the group and died before its chains; the next call carries them out."""
    broker, fanin = stream_broker(redis_url, key_prefix)
    journal: list[str] = []
    release = asyncio.Event()
    thens: list[GroupResult] = []

    @broker.task
    async def fetch(name: str) -> str:
        journal.append(f"fetch {name}")
        return name

    @broker.task
    async def forget(name: str) -> None:
        journal.append(f"forget {name}")

    @broker.task
    async def encode(name: str) -> str:
        journal.append(f"encode {name}")
        await release.wait()
        return name

    @broker.task
    async def publish(name: str) -> None:
        journal.append(f"publish {name}")

    @broker.task
    async def then(result: GroupResult) -> None:
        thens.append(result)

    names = [f"clip{i}" for i in range(MEMBERS)]
    chains = [
        chain(
            Signature.of(fetch, name).with_compensation(Signature.of(forget, name)),
            Signature.of(encode),
            Signature.of(publish),
        )
        for name in names
    ]
    async with worker(broker, max_async_tasks=2 * MEMBERS) as receiver:
        await group(chains, then=then, group_id="batch").kiq(broker)
        await eventually(
            lambda: sum(e.startswith("encode") for e in journal) == MEMBERS,
            what="every chain at its long step",
        )
        if half_way:
            keys = GroupKeys(key_prefix, "batch")
            assert await fanin.context.scripts.cancel_group(keys, tombstone_ms=60_000)
        assert await cancel(broker, "batch") is not half_way
        release.set()
        for i in range(MEMBERS):
            await eventually(
                lambda i=i: chain_reached(fanin, f"batch~{i}~undo", ChainState.DONE),
                what=f"chain {i}'s compensations",
            )
        await drained(broker, receiver)
        states = [
            (await chain_status(fanin, f"batch~{i}")).state for i in range(MEMBERS)
        ]
        status = await group_status(fanin, "batch")

    assert states == [ChainState.CANCELLED] * MEMBERS
    assert not [e for e in journal if e.startswith("publish")]
    assert sorted(e for e in journal if e.startswith("forget")) == [
        f"forget {name}" for name in names
    ]
    assert thens == []
    assert status.state is GroupState.CANCELLED


async def test_a_redis_blip_in_is_cancelled_is_ridden_out_not_raised(
    redis_url: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first read meets Redis away (a failover's moment): it is asked again,
    as the hooks do, and the body goes on."""
    broker, _ = stream_broker(redis_url, key_prefix)
    answers: list[bool] = []
    asked = continuation.is_cancelled
    blips = [ConnectionError("Redis is away")]

    async def flaky(*args: object, **kwargs: object) -> bool:
        if blips:
            raise blips.pop()
        return await asked(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(continuation, "is_cancelled", flaky)

    @broker.task
    async def transcode(index: int) -> None:
        answers.append(await is_cancelled())

    async with worker(broker, max_async_tasks=1) as receiver:
        await group([Signature.of(transcode, 0)]).kiq(broker)
        await eventually(lambda: answers == [False], what="the answer")
        await drained(broker, receiver)

    assert blips == []  # it did meet the blip
