"""A worker app on taskiq-redis's ListQueueBroker, which never redelivers: a
message taken by a worker that dies is gone, and only the sweep gets it back.

Configured from the environment: ``REDIS_URL``, ``APP_PREFIX`` (keys and queue),
``BLOCK_MEMBER`` (the member index that hangs until the worker is killed).
"""

import asyncio
import os

from redis.asyncio import Redis
from taskiq_redis import ListQueueBroker

from taskiq_fanin import FanInMiddleware, GroupResult

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
PREFIX = os.environ.get("APP_PREFIX", "sweep-app")
BLOCK_MEMBER = int(os.environ.get("BLOCK_MEMBER", "-1"))
QUEUE = f"{PREFIX}:queue"
STARTED = f"{PREFIX}:started"
PUBLISHED = f"{PREFIX}:published"

broker = ListQueueBroker(REDIS_URL, queue_name=QUEUE).with_middlewares(
    FanInMiddleware(REDIS_URL, prefix=PREFIX)
)


@broker.task(task_name="sweep_app.member")
async def member(index: int) -> int:
    """Say it started; hang if it is the member chosen to be lost with its worker."""
    async with Redis.from_url(REDIS_URL) as redis:
        await redis.rpush(STARTED, index)
    if index == BLOCK_MEMBER:
        await asyncio.sleep(3600)
    return index


@broker.task(task_name="sweep_app.publish")
async def publish(result: GroupResult) -> None:
    """Leave the result where the test can read it."""
    async with Redis.from_url(REDIS_URL) as redis:
        await redis.rpush(PUBLISHED, result.model_dump_json())
