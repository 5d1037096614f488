"""Retrying a hook's Redis work while Redis is away, then giving up loudly.

A member's outcome, a chain's transition, a continuation's completion and a run
guard are never logged and dropped: while Redis is unreachable (restarting,
paused, failing over) the hook retries with backoff, for ``retry_for`` seconds
at most, and then raises, so that taskiq leaves the message unacknowledged and
it comes back (the work is idempotent). An error that is not Redis being away
(a bug, a script refusing) is raised at once. A caller's verbs (``kiq()``,
``cancel()``) ride through it the same way (``api/retries.py``).
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from redis.asyncio.sentinel import MasterNotFoundError
from redis.exceptions import (
    ClusterError,
    ReadOnlyError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import (
    ConnectionError as RedisConnectionError,
)
from redis.exceptions import (
    TimeoutError as RedisTimeoutError,
)

logger = logging.getLogger("taskiq_fanin")

T = TypeVar("T")

#: Redis away: down, restarting, loading, paused past the socket timeout, a
#: replica promoted (writes refused for a moment: ``READONLY`` from a demoted
#: primary), no sentinel naming a primary yet (a failover under way), a
#: cluster slot moving; of a Cluster, a slot with no primary for a moment (a
#: failover under way: ``CLUSTERDOWN`` from every node, ``ClusterDownError``
#: and ``MasterDownError``; redis-py's own tries used up on it, or on slots
#: moving, ``ClusterError`` "TTL exhausted"; its slots cache not covering a
#: slot yet, ``SlotNotCoveredError``).
TRANSIENT: tuple[type[BaseException], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    ReadOnlyError,
    MasterNotFoundError,
    TryAgainError,
    ClusterError,
    SlotNotCoveredError,
    ConnectionError,
    TimeoutError,
)
#: The first wait between tries, and the longest (seconds).
FIRST_BACKOFF = 0.05
LONGEST_BACKOFF = 2.0


def is_transient(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it: a kick wraps it) is Redis being away."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, TRANSIENT):
            return True
        seen = seen.__cause__
    return False


#: What the log says when a hook gives up.
LEFT_UNACKNOWLEDGED = "%s %s failed; its message is left unacknowledged to come back"


async def retrying(
    work: Callable[[], Awaitable[T]],
    *,
    retry_for: float,
    what: tuple[str, str],
    giving_up: str = LEFT_UNACKNOWLEDGED,
    log_refusals: bool = True,
) -> T:
    """Run ``work``; while it fails with Redis away, again, up to ``retry_for`` s.

    ``what``: what is done, and of which task (for the log, when it retries);
    ``giving_up``: what the log says when it raises (``what`` filled in);
    ``log_refusals``: also when the error is not Redis away (a caller's bad
    input is the caller's to report, not the log's).
    """
    loop = asyncio.get_running_loop()
    give_up_at = loop.time() + retry_for
    backoff = FIRST_BACKOFF
    while True:
        try:
            return await work()
        except Exception as error:
            left = give_up_at - loop.time()
            transient = is_transient(error)
            if not transient or left <= 0:
                if transient or log_refusals:
                    logger.exception(giving_up, *what)
                raise
            logger.warning("%s %s: Redis is away (%s); retrying", *what, error)
        await asyncio.sleep(min(backoff, left))  # the last try at the very end
        backoff = min(backoff * 2, LONGEST_BACKOFF)
