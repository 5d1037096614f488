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
    RedisClusterException,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import (
    ConnectionError as RedisConnectionError,
)
from redis.exceptions import (
    TimeoutError as RedisTimeoutError,
)

from taskiq_fanin.domain.exceptions import FanInError

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
#: What redis-py's Cluster client raises when its slots refresh meets a
#: failover under way (``NodesManager.initialize``): the nodes disagree on the
#: slots for a moment, or leave some uncovered. Matched by message, narrowly:
#: its other ``RedisClusterException`` s are misuse, not Redis away.
CLUSTER_REFRESHING = (
    "All slots are not covered",
    "startup_nodes could not agree on a valid slots cache",
)
#: The first wait between tries, and the longest (seconds).
FIRST_BACKOFF = 0.05
LONGEST_BACKOFF = 2.0


def is_transient(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it: a kick wraps it) is Redis being away.

    One of ours that is not (bad input, a group lost) is final, whatever
    caused it.
    """
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, TRANSIENT) or _cluster_refreshing(seen):
            return True
        if isinstance(seen, FanInError):
            return False
        seen = seen.__cause__
    return False


def _cluster_refreshing(error: BaseException) -> bool:
    return isinstance(error, RedisClusterException) and any(
        text in str(error) for text in CLUSTER_REFRESHING
    )


#: What the log says when a hook gives up.
LEFT_UNACKNOWLEDGED = "%s %s failed; its message is left unacknowledged to come back"


async def retrying(
    work: Callable[[], Awaitable[T]],
    *,
    retry_for: float,
    what: tuple[str, str],
    giving_up: str = LEFT_UNACKNOWLEDGED,
    log_refusals: bool = True,
    final: Callable[[BaseException], bool] = lambda _: False,
    traceback: bool = True,
) -> T:
    """Run ``work``; while it fails with Redis away, again, up to ``retry_for`` s.

    ``what``: what is done, and of which task (for the log, when it retries);
    ``giving_up``: what the log says when it raises (``what`` filled in);
    ``log_refusals``: also when the error is not Redis away (a caller's bad
    input is the caller's to report, not the log's); ``final``: an error
    raised at once, Redis away or not (a caller's own iterator's);
    ``traceback``: logged with it when giving up (a caller's verb raises it to
    its caller, who reports it: a warning alone, not the error twice).
    """
    loop = asyncio.get_running_loop()
    give_up_at = loop.time() + retry_for
    backoff = FIRST_BACKOFF
    while True:
        try:
            return await work()
        except Exception as error:
            left = give_up_at - loop.time()
            transient = not final(error) and is_transient(error)
            if not transient or left <= 0:
                if traceback and (transient or log_refusals):
                    logger.exception(giving_up, *what)
                elif transient or log_refusals:
                    logger.warning(giving_up + " (%s)", *what, error)
                raise
            logger.warning("%s %s: Redis is away (%s); retrying", *what, error)
        await asyncio.sleep(min(backoff, left))  # the last try at the very end
        backoff = min(backoff * 2, LONGEST_BACKOFF)
