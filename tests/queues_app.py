"""A worker app of two queues for the queues test: light steps and heavy members.

Two ``RedisStreamBroker`` s on ``REDIS_URL``, each with its own stream and a
``FanInMiddleware`` of the same prefix (``APP_PREFIX``). ``taskiq worker
tests.queues_app:light`` consumes only the light stream, ``...:heavy`` only the
heavy one; each task says on ``OBS_URL`` (a server of the test's own) which
process ran it.
"""

import os

from redis.asyncio import Redis
from taskiq_redis import RedisStreamBroker

from taskiq_fanin import FanInMiddleware, GroupResult

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
OBS_URL = os.environ.get("OBS_URL", "redis://127.0.0.1:6379/0")
PREFIX = os.environ.get("APP_PREFIX", "queues")


def _broker(queue: str) -> RedisStreamBroker:
    return RedisStreamBroker(
        REDIS_URL, queue_name=f"{PREFIX}:{queue}", xread_block=100
    ).with_middlewares(FanInMiddleware(REDIS_URL, prefix=PREFIX))


light = _broker("light")
heavy = _broker("heavy")

_obs: Redis | None = None


async def ran(name: str) -> None:
    """Say on the observation server that this process ran ``name``."""
    global _obs  # noqa: PLW0603 - one client per process, made on first use
    if _obs is None:
        _obs = Redis.from_url(OBS_URL, decode_responses=True)
    await _obs.rpush(f"{PREFIX}:ran", f"{os.getpid()} {name}")


@light.task(task_name="queues.probe")
async def probe(video: str) -> int:
    """The light first step."""
    await ran("probe")
    return len(video)


@heavy.task(task_name="queues.encode")
async def encode(size: int, rendition: int) -> int:
    """A heavy member of the group step."""
    await ran("encode")
    return size * rendition


@light.task(task_name="queues.publish")
async def publish(result: GroupResult) -> None:
    """The light last step."""
    await ran(f"publish {result.results}")
