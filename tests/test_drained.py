"""``drained``: a test counts only once nothing more will run, on a real
redis-server and a real Receiver.
"""

import asyncio
from typing import Any

import pytest
from taskiq import TaskiqMessage, TaskiqMiddleware, TaskiqResult

from tests.harness import drained, eventually, stream_broker, worker


class KicksLate(TaskiqMiddleware):
    """After ``first`` runs, a slow ``post_execute`` kicks ``second``: a wrong
    second event that comes late, as a slow finaliser's would.
    """

    def __init__(self) -> None:
        super().__init__()
        self.after: dict[str, Any] = {}

    async def post_execute(self, message: TaskiqMessage, _: TaskiqResult[Any]) -> None:
        follow = self.after.get(message.task_name)
        if follow is not None:
            await asyncio.sleep(0.5)  # the finaliser's own work
            await follow.kiq()


async def test_drained_waits_for_what_a_post_execute_kicks_late(
    redis_url: str, key_prefix: str
) -> None:
    late = KicksLate()
    broker, _ = stream_broker(redis_url, key_prefix, late)
    ran: list[str] = []

    @broker.task
    async def first() -> None:
        ran.append("first")

    @broker.task
    async def second() -> None:
        ran.append("second")

    late.after[first.task_name] = second
    async with worker(broker, max_async_tasks=2) as receiver:
        await first.kiq()
        await eventually(lambda: ran == ["first"], what="first to run")
        await drained(broker, receiver)
        assert ran == ["first", "second"]


async def test_drained_waits_for_messages_no_slot_has_taken_yet(
    redis_url: str, key_prefix: str
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix)
    ran: list[int] = []

    @broker.task
    async def slow(index: int) -> None:
        await asyncio.sleep(0.05)  # the task's own work
        ran.append(index)

    async with worker(broker, max_async_tasks=1) as receiver:
        for index in range(10):
            await slow.kiq(index)
        await drained(broker, receiver)
        assert sorted(ran) == list(range(10))


async def test_drained_fails_while_a_task_is_still_running(
    redis_url: str, key_prefix: str
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix)
    release = asyncio.Event()

    @broker.task
    async def stuck() -> None:
        await release.wait()

    async with worker(broker, max_async_tasks=1) as receiver:
        await stuck.kiq()
        with pytest.raises(AssertionError, match="to drain"):
            await drained(broker, receiver, timeout=0.5)
        release.set()
        await drained(broker, receiver)


class DiesAfterRunning(TaskiqMiddleware):
    """The worker "dies" after the body ran: its message stays unacknowledged."""

    def post_execute(self, message: TaskiqMessage, _: TaskiqResult[Any]) -> None:
        raise RuntimeError("the worker died")


async def test_drained_leaves_out_only_the_messages_a_test_abandoned(
    redis_url: str, key_prefix: str
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix, DiesAfterRunning())
    ran: list[str] = []

    @broker.task
    async def doomed() -> None:
        ran.append("doomed")

    async with worker(broker, max_async_tasks=1) as receiver:
        await doomed.kiq()
        await eventually(lambda: ran == ["doomed"], what="the body to run")
        with pytest.raises(AssertionError, match="to drain"):
            await drained(broker, receiver, timeout=0.5)
        await drained(broker, receiver, abandoned=1)
        with pytest.raises(AssertionError, match="to drain"):
            await drained(broker, receiver, abandoned=2, timeout=0.5)
