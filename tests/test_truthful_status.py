"""Statuses that tell the truth, on a real redis-server and a real Receiver: a
cancelled group counts the members that ran anyway, a finished group or chain
keeps its finish time (and its age stops there), and a chain failed by a group
step names each failed member's error.
"""

import asyncio

from taskiq import AsyncBroker

from taskiq_fanin import (
    GroupResult,
    GroupState,
    GroupStatus,
    Signature,
    cancel,
    group,
    status,
)
from tests.harness import SentMessages, eventually, stream_broker, worker


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

    async with worker(broker, max_async_tasks=4):
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

    assert found.state is GroupState.CANCELLED
    assert (found.done, found.failed, found.pending) == (2, 1, 0)
    assert continued == []
    assert sent.executions_of(then.task_name) == 0


async def _pending_is(broker: AsyncBroker, group_id: str, pending: int) -> bool:
    found = await status(broker, group_id)
    return isinstance(found, GroupStatus) and found.pending == pending
