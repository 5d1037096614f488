"""Whether a worker with the middleware served a queue lately: planners look.

A worker whose broker lacks the middleware runs members and records nothing:
its groups sit at 0 of N until their deadline, with no error anywhere. Workers
with the middleware announce the queue they serve (``worker/heartbeat.py``);
planning a group or starting a chain onto a queue none announced lately logs a
warning that names the fix, at most one read per queue every ``EVERY`` seconds
in a process. No member pays anything for it.
"""

import logging
import time

from redis.exceptions import RedisError

from taskiq_fanin.context import FanInContext, queue_name
from taskiq_fanin.storage.keys import workers_key

logger = logging.getLogger("taskiq_fanin")

#: Seconds between a worker's announcements (and between a planner's looks).
EVERY = 10.0
#: Seconds an announcement lasts: a worker is "seen" that long after its last.
SEEN_FOR = 30.0

#: When this process last warned of a queue (its key), on its own clock.
_warned: dict[str, float] = {}


async def warn_if_unserved(ctx: FanInContext, task_name: str, what: str) -> None:
    """Warn if no worker with the middleware served ``task_name``'s queue lately.

    ``what`` (a group, a chain) would then never record anything.
    """
    queue = queue_name(ctx.broker_for(task_name))
    if not isinstance(queue, str):
        return
    key = workers_key(ctx.config.prefix, queue)
    try:
        seen = await ctx.worker_reads.get(key, lambda: _exists(ctx, key))
    except (RedisError, OSError):
        return  # a diagnostic: the plan itself went through
    now = time.monotonic()
    if not seen and now - _warned.get(key, -EVERY) >= EVERY:
        _warned[key] = now  # once a queue every EVERY seconds, however many plan
        logger.warning(
            "%s: no worker with FanInMiddleware seen on queue %r in the last %g s: "
            "a worker without it runs the members and records nothing, so the "
            "group never completes; add FanInMiddleware to the worker's broker",
            what,
            queue,
            SEEN_FOR,
        )


async def _exists(ctx: FanInContext, key: str) -> bool:
    return bool(await ctx.redis.exists(key))
