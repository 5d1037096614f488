"""A real taskiq worker inside the test's event loop, and waiting with a deadline.

The broker is taskiq-redis's ``RedisStreamBroker`` on the test's own stream, and
the worker is taskiq's own ``Receiver`` with a bounded ``max_async_tasks``: the
same code ``taskiq worker`` runs, without a process to manage.
"""

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from taskiq import AsyncBroker, BrokerMessage, TaskiqMessage, TaskiqMiddleware
from taskiq.receiver import Receiver
from taskiq_redis import RedisStreamBroker

from taskiq_fanin import FanInMiddleware
from taskiq_fanin.scripts import RedisClient


def stream_broker(
    redis_url: str,
    prefix: str,
    *middlewares: TaskiqMiddleware,
    fanin_redis: str | RedisClient | None = None,
    **fanin: Any,
) -> tuple[AsyncBroker, FanInMiddleware]:
    """A stream broker on its own stream, with a ``FanInMiddleware`` under ``prefix``
    (on ``fanin_redis``, a URL or a client, when given, else on the broker's Redis).
    """
    fanin_middleware = FanInMiddleware(fanin_redis or redis_url, prefix=prefix, **fanin)
    broker = RedisStreamBroker(
        redis_url, queue_name=f"{prefix}:stream", xread_block=100
    ).with_middlewares(*middlewares, fanin_middleware)
    return broker, fanin_middleware


@contextlib.asynccontextmanager
async def worker(broker: AsyncBroker, max_async_tasks: int) -> AsyncIterator[Receiver]:
    """Run a ``Receiver`` with ``max_async_tasks`` slots until the block ends."""
    await broker.startup()
    receiver = Receiver(broker, max_async_tasks=max_async_tasks, run_startup=False)
    finished = asyncio.Event()
    listening = asyncio.create_task(receiver.listen(finished))
    try:
        yield receiver
    finally:
        finished.set()
        try:
            await asyncio.wait_for(listening, timeout=10)
        finally:
            await broker.shutdown()


async def eventually(
    condition: Callable[[], bool | Awaitable[bool]],
    *,
    timeout: float = 20.0,
    what: str = "condition",
) -> None:
    """Wait until ``condition`` holds; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        held = condition()
        if not isinstance(held, bool):
            held = await held
        if held:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.02)


class DuplicatingMiddleware(TaskiqMiddleware):
    """At-least-once delivery, simulated: sends chosen messages a second time."""

    def __init__(self, choose: Callable[[TaskiqMessage], bool]) -> None:
        super().__init__()
        self.choose = choose
        self.duplicated: list[TaskiqMessage] = []

    async def post_send(self, message: TaskiqMessage) -> None:
        if self.choose(message):
            self.duplicated.append(message)
            await self.broker.kick(self.broker.formatter.dumps(message))


class SentMessages(TaskiqMiddleware):
    """Remembers what was sent (to send the very same message again) and which
    messages a worker has finished with, skipped or not.
    """

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[TaskiqMessage] = []
        self.executed: list[TaskiqMessage] = []

    def post_send(self, message: TaskiqMessage) -> None:
        self.sent.append(message)

    def post_execute(self, message: TaskiqMessage, result: object) -> None:
        self.executed.append(message)

    def executions_of(self, task_name: str) -> int:
        return sum(1 for m in self.executed if m.task_name == task_name)

    def of_task(self, task_name: str) -> list[TaskiqMessage]:
        return [m for m in self.sent if m.task_name == task_name]

    async def resend(self, message: TaskiqMessage) -> None:
        encoded: BrokerMessage = self.broker.formatter.dumps(message)
        await self.broker.kick(encoded)
