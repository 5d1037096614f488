"""A real taskiq worker inside the test's event loop, or in a process of its own.

The broker is taskiq-redis's ``RedisStreamBroker`` on the test's own stream, and
the worker is taskiq's own ``Receiver`` with a bounded ``max_async_tasks``: the
same code ``taskiq worker`` runs, without a process to manage. Waiting with a
deadline (``eventually``) and the worker processes come from ``local_redis``;
``drained`` waits until nothing more will run, before a test counts.
"""

import asyncio
import contextlib
import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from redis.asyncio import Redis, Sentinel
from taskiq import (
    AckableMessage,
    AsyncBroker,
    BrokerMessage,
    TaskiqMessage,
    TaskiqMiddleware,
    TaskiqResult,
)
from taskiq.receiver import Receiver
from taskiq_redis import RedisStreamBroker

from local_redis import (
    CONSUMER_GROUP,
    DuplicatingMiddleware,
    TaskiqWorker,
    eventually,
    stream_drained,
)
from taskiq_fanin import FanInMiddleware, sweep
from taskiq_fanin.inspection import chain_status, group_status
from taskiq_fanin.models import ChainState
from taskiq_fanin.transport.client import RedisClient

__all__ = [
    "BLOCK_MS",
    "ROOT",
    "DuplicatingMiddleware",
    "HandlingReceiver",
    "LossyStreamBroker",
    "SentMessages",
    "chain_reached",
    "close_sentinels",
    "drained",
    "eventually",
    "lossy_stream_broker",
    "overdue",
    "stream_broker",
    "sweep_sees",
    "worker",
    "worker_process",
]


class LossyStreamBroker(RedisStreamBroker):
    """A stream broker that loses messages on purpose.

    ``drop`` holds task ids whose next send is silently lost (a purge, a bug); with
    ``fail_after`` set, every send after that many raises (a planner dying).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.drop: set[str] = set()
        self.fail_after: int | None = None
        self.sent = 0

    async def kick(self, message: BrokerMessage) -> None:
        if self.fail_after is not None and self.sent >= self.fail_after:
            raise ConnectionError("the planner's connection died")
        self.sent += 1
        if message.task_id in self.drop:
            self.drop.discard(message.task_id)
            return
        await super().kick(message)


#: How long a test broker's read of its stream blocks (ms).
BLOCK_MS = 100


def stream_broker(
    redis_url: str,
    prefix: str,
    *middlewares: TaskiqMiddleware,
    fanin_redis: str | RedisClient | None = None,
    **fanin: Any,
) -> tuple[RedisStreamBroker, FanInMiddleware]:
    """A stream broker on its own stream, with a ``FanInMiddleware`` under ``prefix``
    (on ``fanin_redis``, a URL or a client, when given, else on the broker's Redis).

    A plain ``RedisStreamBroker``, so the library's kicks go in pipelines as they
    do for users (``taskiq_fanin.transport.queue_kicks``).
    """
    broker = RedisStreamBroker(
        redis_url, queue_name=f"{prefix}:stream", xread_block=BLOCK_MS
    )
    fanin_middleware = FanInMiddleware(fanin_redis or redis_url, prefix=prefix, **fanin)
    broker.with_middlewares(*middlewares, fanin_middleware)
    return broker, fanin_middleware


def lossy_stream_broker(
    redis_url: str,
    prefix: str,
    *middlewares: TaskiqMiddleware,
    fanin_redis: str | RedisClient | None = None,
    **fanin: Any,
) -> tuple[LossyStreamBroker, FanInMiddleware]:
    """As :func:`stream_broker`, on a broker that can lose or refuse messages.

    Its own ``kick`` makes the library kick through it one message at a time.
    """
    broker = LossyStreamBroker(
        redis_url, queue_name=f"{prefix}:stream", xread_block=BLOCK_MS
    )
    fanin_middleware = FanInMiddleware(fanin_redis or redis_url, prefix=prefix, **fanin)
    broker.with_middlewares(*middlewares, fanin_middleware)
    return broker, fanin_middleware


class HandlingReceiver(Receiver):
    """taskiq's ``Receiver``, counting the messages it is handling right now."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.handling = 0

    async def callback(
        self, message: bytes | AckableMessage, raise_err: bool = False
    ) -> None:
        self.handling += 1
        try:
            await super().callback(message, raise_err=raise_err)
        finally:
            self.handling -= 1


@contextlib.asynccontextmanager
async def worker(
    broker: AsyncBroker, max_async_tasks: int
) -> AsyncIterator[HandlingReceiver]:
    """Run a ``Receiver`` with ``max_async_tasks`` slots until the block ends."""
    await broker.startup()
    receiver = HandlingReceiver(
        broker, max_async_tasks=max_async_tasks, run_startup=False
    )
    finished = asyncio.Event()
    listening = asyncio.create_task(receiver.listen(finished))
    try:
        yield receiver
    finally:
        finished.set()
        # The Receiver can hang while cancelling its pending read of the stream
        # (taskiq-redis, seen here now and then): closing the broker's
        # connections wakes that read, so the listener gets a second chance.
        done, _ = await asyncio.wait({listening}, timeout=5)
        await broker.shutdown()
        if not done:
            done, _ = await asyncio.wait({listening}, timeout=5)
        if not done:
            listening.cancel()
            await asyncio.wait({listening}, timeout=5)


async def chain_reached(
    source: FanInMiddleware | AsyncBroker, chain_id: str, state: ChainState
) -> bool:
    """Whether the chain's record says ``state`` now (a condition for ``eventually``).

    A chain that fails is ``failed`` only after the kicks of its ``on_error`` and
    its compensations have returned, so what those ran may be seen first: wait
    for the state itself, not for what it kicked.
    """
    return (await chain_status(source, chain_id)).state is state


async def overdue(fanin: FanInMiddleware | AsyncBroker, group_id: str) -> bool:
    """Whether the group is past its deadline now (a condition for ``eventually``)."""
    return (await group_status(fanin, group_id)).overdue()


async def sweep_sees(fanin: FanInMiddleware, group_id: str) -> bool:
    """A dry run of the sweep finds the group due, and only it (its index entry
    is due): a condition for ``eventually``."""
    report = await sweep(fanin, dry_run=True)
    return [f.group_id for f in report.findings] == [group_id]


async def close_sentinels(sentinel: Sentinel) -> None:
    """Close a ``Sentinel`` 's clients of its sentinels (nothing else does)."""
    for client in sentinel.sentinels:
        await client.aclose()


async def drained(
    broker: RedisStreamBroker,
    receiver: HandlingReceiver,
    *,
    abandoned: int = 0,
    timeout: float = 20.0,
) -> None:
    """Wait until nothing more will run: then a test may count what ran.

    Every message in the broker's stream has been delivered and acknowledged
    (the consumer group's lag and pending are 0) and the receiver handles none.
    taskiq acknowledges a message last, after its ``post_execute`` (and a
    retry's ``on_error``) has returned, and a kick returns once the stream holds
    its message: a continuation or a next step kicked by a member is in the
    stream before that member is acknowledged. So once the stream is drained,
    nothing already sent can make anything run, and a wrong second event has
    already happened; a fixed sleep instead passes when it comes late. Only a
    new kick from outside (the test, a sweep) runs anything after.

    ``abandoned``: how many messages the test's fault left unacknowledged on
    purpose (a worker that "died" holding them); exactly those stay pending.
    """
    client = Redis(connection_pool=broker.connection_pool)
    stream = broker.queue_name

    async def nothing_left() -> bool:
        if receiver.handling:
            return False
        if not abandoned:
            return await stream_drained(client, stream)
        groups = await client.xinfo_groups(stream)
        (found,) = [g for g in groups if g["name"] == CONSUMER_GROUP.encode()]
        return bool(found["lag"] == 0 and found["pending"] == abandoned)

    try:
        await eventually(
            nothing_left, timeout=timeout, what=f"{stream} and its worker to drain"
        )
    finally:
        await client.aclose()


class SentMessages(TaskiqMiddleware):
    """Remembers what was sent (to send the very same message again) and which
    messages a worker has finished with, skipped or not.
    """

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[TaskiqMessage] = []
        self.executed: list[TaskiqMessage] = []
        self.results: list[object] = []

    def post_send(self, message: TaskiqMessage) -> None:
        self.sent.append(message)

    def post_execute(self, message: TaskiqMessage, result: TaskiqResult[Any]) -> None:
        self.executed.append(message)
        self.results.append(result.return_value)

    def executions_of(self, task_name: str) -> int:
        return sum(1 for m in self.executed if m.task_name == task_name)

    def of_task(self, task_name: str) -> list[TaskiqMessage]:
        return [m for m in self.sent if m.task_name == task_name]

    async def resend(self, message: TaskiqMessage) -> None:
        encoded: BrokerMessage = self.broker.formatter.dumps(message)
        await self.broker.kick(encoded)


ROOT = Path(__file__).resolve().parent.parent


@contextlib.contextmanager
def worker_process(
    app: str,
    env: dict[str, str],
    *,
    max_async_tasks: int = 10,
    log: Path | None = None,
    shutdown_timeout: float = 1.0,
) -> Iterator[subprocess.Popen[bytes]]:
    """A real ``taskiq worker`` process for ``app`` (``module:broker``).

    It runs in its own process group, and is stopped for certain: ``taskiq
    worker`` can hang on SIGTERM, so SIGKILL follows a short grace. With ``log``,
    its output (both streams) is appended to that file, to be read afterwards.
    ``shutdown_timeout``: taskiq's ``--shutdown-timeout``, the longest its
    broker's shutdown (the middleware's recording what ended) may take.
    """
    environment = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    with TaskiqWorker(
        app,
        max_async_tasks=max_async_tasks,
        options=("--shutdown-timeout", str(shutdown_timeout)),
        cwd=ROOT,
        env=environment,
        log_path=log,
        append=True,
    ) as running:
        assert running.process is not None
        yield running.process
