"""What the worker apps of the fault and failover tests share: the observation
server's client and keys, the middleware counting deliveries, and (for the
failover tests' apps, ``tests.sentinel_app`` and ``tests.cluster_failover_app``)
their tasks and middlewares on a given broker.

Each app keeps only its broker. Read from the environment when ``install`` is
called (an app is reloaded for each test, this module is not):

- ``DEADLINE``, ``FINALISER_LEASE``, ``RETRY_FOR``, ``SOCKET_TIMEOUT``: the
  middleware's options of those names (seconds).
- ``DURABILITY``, ``REPLICAS``: the middleware's ``durability`` and
  ``replicas`` options, when set (left out, the middleware's defaults).
- ``MEMBER_SECONDS``, ``STEP_SECONDS``: how long a member, a chain step takes.
"""

import asyncio
import os
from dataclasses import dataclass
from typing import Any

from redis.asyncio import BlockingConnectionPool, Redis
from taskiq import AsyncBroker, TaskiqMessage, TaskiqMiddleware

from taskiq_fanin import FanInMiddleware, GroupResult


class Observer:
    """A plain Redis that no fault touches, where the workers say what they did
    (under ``key``), so that a count is never lost with the fault."""

    def __init__(self, url: str, prefix: str) -> None:
        self.url = url
        self.prefix = prefix
        self._client: Redis | None = None

    def key(self, name: str) -> str:
        """A key on the observation server."""
        return f"{self.prefix}:obs:{name}"

    def client(self) -> Redis:
        """This process's client of the observation server (one pool for all
        tasks, made on first use)."""
        if self._client is None:
            pool = BlockingConnectionPool.from_url(self.url)
            self._client = Redis(connection_pool=pool)
        return self._client


class CountDeliveries(TaskiqMiddleware):
    """Counts every delivery that reaches a worker, by task name and by task id."""

    def __init__(self, observer: Observer) -> None:
        super().__init__()
        self.observer = observer

    async def pre_execute(self, message: TaskiqMessage) -> TaskiqMessage:
        obs = self.observer
        async with obs.client().pipeline(transaction=False) as pipe:
            pipe.hincrby(obs.key("delivered"), message.task_name, 1)
            pipe.hincrby(obs.key("delivered_ids"), message.task_id, 1)
            await pipe.execute()
        return message


class CountRecorded(CountDeliveries):
    """Also counts (after the library's hook recorded it: hooks after
    ``pre_execute`` run in reverse order) every member outcome recorded."""

    def __init__(self, observer: Observer, member_task: str) -> None:
        super().__init__(observer)
        self.member_task = member_task

    async def post_execute(self, message: TaskiqMessage, result: Any) -> None:
        if message.task_name == self.member_task:
            obs = self.observer
            await obs.client().sadd(obs.key("recorded"), message.task_id)


@dataclass(frozen=True)
class FailoverTasks:
    """The tasks a failover test kicks."""

    #: ``member(group_id, index)``: takes ``MEMBER_SECONDS``.
    member: Any
    #: The continuation: says it ran to its end, for which group, with how many.
    publish: Any
    #: ``step(previous, chain_id, index)``: a chain step, says it ran.
    step: Any


def install(
    broker: AsyncBroker, url: str, observer: Observer, *, app: str, **options: Any
) -> FailoverTasks:
    """The observation and the library (on ``url``, with ``options`` and the
    environment's) as ``broker``'s middlewares, and the tasks, named ``app.*``."""
    member_task = f"{app}.member"
    member_seconds = float(os.environ.get("MEMBER_SECONDS", "0"))
    step_seconds = float(os.environ.get("STEP_SECONDS", "0"))
    if os.environ.get("DURABILITY"):
        options["durability"] = os.environ["DURABILITY"]
    if os.environ.get("REPLICAS"):
        options["replicas"] = int(os.environ["REPLICAS"])
    broker.with_middlewares(
        CountRecorded(observer, member_task),
        FanInMiddleware(
            url,
            prefix=observer.prefix,
            finaliser_lease=float(os.environ.get("FINALISER_LEASE", "3")),
            deadline=float(os.environ.get("DEADLINE", "3600")),
            socket_timeout=float(os.environ.get("SOCKET_TIMEOUT", "2")),
            retry_for=float(os.environ.get("RETRY_FOR", "30")),
            **options,
        ),
    )
    obs = observer

    @broker.task(task_name=member_task)
    async def member(group_id: str, index: int) -> int:
        if member_seconds:
            await asyncio.sleep(member_seconds)
        return index

    @broker.task(task_name=f"{app}.publish")
    async def publish(result: GroupResult) -> None:
        async with obs.client().pipeline(transaction=False) as pipe:
            pipe.hincrby(obs.key("continuations"), result.group_id, 1)
            pipe.hset(obs.key("succeeded"), result.group_id, result.done_count)
            await pipe.execute()

    @broker.task(task_name=f"{app}.step")
    async def step(previous: int, chain_id: str, index: int) -> int:
        if step_seconds:
            await asyncio.sleep(step_seconds)
        await obs.client().hincrby(obs.key("steps"), f"{chain_id}~{index}", 1)
        return previous + 1

    return FailoverTasks(member, publish, step)
