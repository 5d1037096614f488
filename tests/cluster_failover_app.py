"""A worker app for the Cluster failover test, on taskiq-redis's
``RedisStreamClusterBroker``, with the library on the same Cluster
(``cluster=True``).

The Sentinel failover's app (``tests.sentinel_app``) on a Cluster: the same
tasks and observations, under task names of its own. Configured from the
environment:

- ``REDIS_CLUSTER_URL``: one node of the Cluster (the others are found from it).
- ``QUEUE``: the broker's stream (the test picks its name, so its slot).
- ``OBS_URL``: a plain Redis that no fault touches, where the workers say what
  they did (``obs_key``), so that no count is lost with a primary.
- ``APP_PREFIX``: the library's keys and the observation keys.
- ``DEADLINE``, ``FINALISER_LEASE``, ``RETRY_FOR``, ``SOCKET_TIMEOUT``: the
  middleware's options of those names (seconds).
- ``DURABILITY``: the middleware's ``durability`` option, when set.
- ``MEMBER_SECONDS``, ``STEP_SECONDS``: how long a member, a chain step takes.
"""

import asyncio
import os
from typing import Any

from redis.asyncio import BlockingConnectionPool, Redis
from taskiq import TaskiqMessage, TaskiqMiddleware
from taskiq_redis import RedisStreamClusterBroker

from taskiq_fanin import FanInMiddleware, GroupResult

REDIS_CLUSTER_URL = os.environ.get("REDIS_CLUSTER_URL", "redis://127.0.0.1:7000")
OBS_URL = os.environ.get("OBS_URL", "redis://127.0.0.1:6380/0")
PREFIX = os.environ.get("APP_PREFIX", "cluster-failover-app")
STREAM = os.environ.get("QUEUE", f"{PREFIX}:stream")
MEMBER_SECONDS = float(os.environ.get("MEMBER_SECONDS", "0"))
STEP_SECONDS = float(os.environ.get("STEP_SECONDS", "0"))
MEMBER_TASK = "cluster_failover_app.member"


def obs_key(name: str) -> str:
    """A key on the observation server."""
    return f"{PREFIX}:obs:{name}"


_obs: Redis | None = None


def obs() -> Redis:
    """This process's client of the observation server."""
    global _obs  # noqa: PLW0603 - one client per process, made on first use
    if _obs is None:
        _obs = Redis(connection_pool=BlockingConnectionPool.from_url(OBS_URL))
    return _obs


class Observe(TaskiqMiddleware):
    """Counts every delivery by task name and by task id, and (after the
    library's hook recorded it: hooks after ``pre_execute`` run in reverse
    order) every member outcome recorded."""

    async def pre_execute(self, message: TaskiqMessage) -> TaskiqMessage:
        async with obs().pipeline(transaction=False) as pipe:
            pipe.hincrby(obs_key("delivered"), message.task_name, 1)
            pipe.hincrby(obs_key("delivered_ids"), message.task_id, 1)
            await pipe.execute()
        return message

    async def post_execute(self, message: TaskiqMessage, result: Any) -> None:
        if message.task_name == MEMBER_TASK:
            await obs().sadd(obs_key("recorded"), message.task_id)


broker = RedisStreamClusterBroker(REDIS_CLUSTER_URL, queue_name=STREAM, xread_block=100)
_durability: dict[str, Any] = (
    {"durability": os.environ["DURABILITY"]} if os.environ.get("DURABILITY") else {}
)
broker.with_middlewares(
    Observe(),
    FanInMiddleware(
        REDIS_CLUSTER_URL,
        cluster=True,
        prefix=PREFIX,
        finaliser_lease=float(os.environ.get("FINALISER_LEASE", "3")),
        deadline=float(os.environ.get("DEADLINE", "3600")),
        socket_timeout=float(os.environ.get("SOCKET_TIMEOUT", "2")),
        retry_for=float(os.environ.get("RETRY_FOR", "30")),
        **_durability,
    ),
)


@broker.task(task_name=MEMBER_TASK)
async def member(group_id: str, index: int) -> int:
    """Take ``MEMBER_SECONDS``."""
    if MEMBER_SECONDS:
        await asyncio.sleep(MEMBER_SECONDS)
    return index


@broker.task(task_name="cluster_failover_app.publish")
async def publish(result: GroupResult) -> None:
    """The continuation: says it ran to its end, for which group, with how many."""
    async with obs().pipeline(transaction=False) as pipe:
        pipe.hincrby(obs_key("continuations"), result.group_id, 1)
        pipe.hset(obs_key("succeeded"), result.group_id, result.done_count)
        await pipe.execute()


@broker.task(task_name="cluster_failover_app.step")
async def step(previous: int, chain_id: str, index: int) -> int:
    """A chain step: says it ran, and hands on one more than it got."""
    if STEP_SECONDS:
        await asyncio.sleep(STEP_SECONDS)
    await obs().hincrby(obs_key("steps"), f"{chain_id}~{index}", 1)
    return previous + 1
