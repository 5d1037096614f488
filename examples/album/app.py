"""The album from the seed: five resize jobs per album, then publish it once.

Run one worker process with ten slots, as in the seed's deadlock:

    taskiq worker examples.album.app:broker --workers 1 --max-async-tasks 10

``make_album`` fans out and ends at once, so ten albums at ten slots do not
deadlock the way parents awaiting their children do.
"""

import asyncio
import os

from redis.asyncio import Redis
from taskiq_redis import RedisStreamBroker

from taskiq_fanin import FanInMiddleware, GroupResult, Signature, group, group_task

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
#: Where ``publish`` leaves a line per album, for ``run.py`` to show.
PUBLISHED_KEY = "example:album:published"

broker = RedisStreamBroker(REDIS_URL, queue_name="example:album").with_middlewares(
    FanInMiddleware(REDIS_URL, prefix="example:fanin")
)


@broker.task
async def resize(album: int, image: int) -> str:
    """Stand-in for real work: 200 ms per image, as in the seed."""
    await asyncio.sleep(0.2)
    return f"album-{album}/image-{image}.jpg"


@broker.task
async def publish(result: GroupResult, album: int) -> None:
    """Runs once per album, after its five images have an outcome."""
    line = f"album {album}: {result.done_count} images, {result.failed_count} failed"
    async with Redis.from_url(REDIS_URL) as redis:
        await redis.rpush(PUBLISHED_KEY, line)


@broker.task
@group_task()
async def make_album(album: int, images: int = 5) -> object:
    """Say what to run; the library plans it, dispatches it, and wires publish."""
    members = [Signature.of(resize, album, image) for image in range(images)]
    return group(members, then=Signature.of(publish, album))
