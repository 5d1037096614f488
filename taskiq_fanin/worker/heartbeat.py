"""A ``taskiq worker`` process with the middleware says which queue it serves.

It sets ``<prefix>:workers:<queue>`` every ``EVERY`` seconds, expiring after
``SEEN_FOR``, for planners to see (``groups/workers_seen.py``).
"""

import asyncio
import contextlib
import logging
import os
import socket

from redis.exceptions import RedisError
from taskiq import AsyncBroker

from taskiq_fanin.context import FanInContext, queue_name
from taskiq_fanin.domain.config import ms
from taskiq_fanin.groups.workers_seen import EVERY, SEEN_FOR
from taskiq_fanin.storage.keys import workers_key

logger = logging.getLogger("taskiq_fanin")


class Heartbeat:
    """A worker process's announcements of the queue it serves, while it runs."""

    def __init__(self) -> None:
        self._task: asyncio.Task[None] | None = None

    def start(self, ctx: FanInContext, broker: AsyncBroker) -> None:
        """Announce ``broker``'s queue now and every ``EVERY`` seconds."""
        queue = queue_name(broker)
        if self._task is None and isinstance(queue, str):
            key = workers_key(ctx.config.prefix, queue)
            self._task = asyncio.create_task(_announce(ctx, key))

    async def stop(self) -> None:
        """Stop announcing (the key expires by itself)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def _announce(ctx: FanInContext, key: str) -> None:
    me = f"{socket.gethostname()}:{os.getpid()}"
    while True:
        try:
            await ctx.redis.set(key, me, px=ms(SEEN_FOR))
        except (RedisError, OSError) as error:  # a diagnostic: tried again
            logger.debug("Could not announce this worker on %s (%s)", key, error)
        await asyncio.sleep(EVERY)
