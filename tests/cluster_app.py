"""A user's app on a Redis Cluster, as ``taskiq worker tests.cluster_app:broker``
and ``taskiq-fanin --broker tests.cluster_app:broker`` import it.

Built at import from the environment: ``REDIS_CLUSTER_URL`` (any one node),
``APP_PREFIX`` (keys and queue: the test's own) and ``BROKER_KIND`` (``stream``
for ``RedisStreamClusterBroker``, ``list`` for ``ListQueueClusterBroker``). The
``FanInMiddleware`` is given the node's URL with ``cluster=True``, and
``APP_DURABILITY`` as its ``durability``.

What ran is counted in one hash, ``<prefix>:counts`` (one key, so one slot),
by every process: ``sent`` by each kick's ``pre_send``, ``finished`` by each
``post_execute`` (after the FanInMiddleware's, which has kicked whatever the
message started by then), and ``run:<task id>`` by each member's body. Once
``sent`` equals ``finished`` plus the kicks a lossy broker dropped, nothing more
will run: a test may count.
"""

import asyncio
import os
from typing import Any

from taskiq import (
    AsyncBroker,
    BrokerMessage,
    Context,
    TaskiqDepends,
    TaskiqMessage,
    TaskiqMiddleware,
    TaskiqResult,
)
from taskiq_redis import ListQueueClusterBroker, RedisStreamClusterBroker

from taskiq_fanin import FanInMiddleware, GroupResult
from tests.window_probe import Gate, InFlightProbe

#: How long a held member waits for its release before it gives up (seconds).
HOLD_LIMIT = 30.0


def counts_key(prefix: str) -> str:
    """The hash of counters."""
    return f"{prefix}:counts"


def published_key(prefix: str) -> str:
    """The list of the GroupResults continuations received, as JSON."""
    return f"{prefix}:published"


def release_key(prefix: str) -> str:
    """Set when held members may return."""
    return f"{prefix}:release"


class LossyStreamClusterBroker(RedisStreamClusterBroker):
    """Loses, once, the kick of each task id in ``drop`` (a purge, a bug)."""

    drop: set[str]

    async def kick(self, message: BrokerMessage) -> None:
        if message.task_id in self.drop:
            self.drop.discard(message.task_id)
            return
        await super().kick(message)


class LossyListQueueClusterBroker(ListQueueClusterBroker):
    """Loses, once, the kick of each task id in ``drop``."""

    drop: set[str]

    async def kick(self, message: BrokerMessage) -> None:
        if message.task_id in self.drop:
            self.drop.discard(message.task_id)
            return
        await super().kick(message)


class Counting(TaskiqMiddleware):
    """Counts every kick and every message a worker has finished with."""

    def __init__(self, fanin: FanInMiddleware) -> None:
        super().__init__()
        self.fanin = fanin

    async def pre_send(self, message: TaskiqMessage) -> TaskiqMessage:
        await self.fanin.context.redis.hincrby(
            counts_key(self.fanin.config.prefix), "sent", 1
        )
        return message

    async def post_execute(
        self, message: TaskiqMessage, result: TaskiqResult[Any]
    ) -> None:
        await self.fanin.context.redis.hincrby(
            counts_key(self.fanin.config.prefix), "finished", 1
        )


def build(
    url: str,
    prefix: str,
    kind: str,
    *,
    lossy: bool = False,
    durability: str = "acknowledged",
) -> AsyncBroker:
    """The app's broker (``lossy``: one whose ``drop`` set loses kicks)."""
    queue = f"{prefix}:queue"
    broker: AsyncBroker
    if kind == "stream":
        stream = LossyStreamClusterBroker if lossy else RedisStreamClusterBroker
        broker = stream(url, queue_name=queue, xread_block=100)
    elif kind == "list":
        listed = LossyListQueueClusterBroker if lossy else ListQueueClusterBroker
        broker = listed(url, queue_name=queue)
    else:
        raise ValueError(f"BROKER_KIND {kind!r}: stream or list")
    if lossy:
        broker.drop = set()  # type: ignore[attr-defined]
    fanin = FanInMiddleware(url, cluster=True, prefix=prefix, durability=durability)
    # Counting goes before the FanInMiddleware: taskiq runs post_execute in
    # reverse order, so a message counts as finished only once fan-in recorded it.
    broker.with_middlewares(Counting(fanin), fanin)
    _register(broker, fanin)
    return broker


def _register(broker: AsyncBroker, fanin: FanInMiddleware) -> None:
    """The app's tasks, under names every process agrees on."""
    prefix = fanin.config.prefix

    def redis() -> Any:
        return fanin.context.redis

    @broker.task(task_name="cluster_app.member")
    async def member(
        index: int, hold: bool = False, context: Context = TaskiqDepends()
    ) -> int:
        await redis().hincrby(counts_key(prefix), f"run:{context.message.task_id}", 1)
        if hold:
            await redis().hincrby(counts_key(prefix), "holding", 1)
            loop = asyncio.get_running_loop()
            deadline = loop.time() + HOLD_LIMIT
            while not await redis().exists(release_key(prefix)):
                if loop.time() > deadline:
                    raise TimeoutError("never released")
                await asyncio.sleep(0.02)
        return index * 10

    gates: dict[str, Gate] = {}

    @broker.task(task_name="cluster_app.windowed")
    async def windowed(group_id: str, index: int, together: int = 0) -> int:
        """A member of a windowed group, counting itself (``window_probe``).

        Members below ``together`` wait for each other (one worker process).
        """
        probe = InFlightProbe(redis(), prefix, group_id)
        gate = gates.setdefault(group_id, Gate(range(together)))
        await probe.run(index, lambda: gate.work(index, 0.02, None))
        return index * 10

    @broker.task(task_name="cluster_app.first")
    async def first(value: int) -> int:
        return value + 1

    @broker.task(task_name="cluster_app.scaled")
    async def scaled(previous: int, index: int) -> int:
        return previous * 100 + index

    @broker.task(task_name="cluster_app.publish")
    async def publish(result: GroupResult) -> None:
        await redis().rpush(published_key(prefix), result.model_dump_json())


broker = build(
    os.environ.get("REDIS_CLUSTER_URL", "redis://127.0.0.1:7000"),
    os.environ.get("APP_PREFIX", "cluster-app"),
    os.environ.get("BROKER_KIND", "stream"),
    durability=os.environ.get("APP_DURABILITY", "acknowledged"),
)
