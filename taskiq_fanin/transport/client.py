"""The library's own Redis client, set up for faults with what redis-py has.

- A blocking connection pool: a burst of callers waits for a connection (up to
  the socket timeout and then some) instead of failing with "too many
  connections"; the library's calls share pipelines, so a few connections do.
- Retries with exponential backoff and jitter on connection errors and timeouts
  (a restart, a failover, a stale pooled connection), a few times, before the
  error reaches the caller (the worker's hooks then retry for longer:
  ``retry_for``).
- Health checks on connections idle for a while, and TCP keepalive, so a dead
  connection is found before a command is lost on it.
- A socket timeout (``socket_timeout``, 5 s by default): a command that takes
  longer counts as Redis being away. Keep it above your slowest script call
  (planning a group of 100,000 members takes well under a second).

On a Redis Cluster (``cluster=True``) the URL names any one node; the client
finds the others and follows their slots. It has the same retries, timeouts and
health checks; its ``max_connections`` is per node, and a caller past it is
retried with the backoff above rather than queued (redis-py's cluster client
has no blocking pool).

A ``redis+sentinel://`` URL names the sentinels and the primary's name
(``transport/sentinel.py``): the client asks a sentinel where the primary is on
every new connection, with the same pool, retries, timeouts and health checks
(the sentinels are asked with the same timeouts and retries).

A client the caller passes in is used as it is: configure it the same way.
"""

import asyncio
import logging
from urllib.parse import urlsplit, urlunsplit

from redis.asyncio import BlockingConnectionPool, Redis, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from taskiq_fanin.domain.exceptions import RedisUnreachableError
from taskiq_fanin.transport.sentinel import is_sentinel_url, sentinel_client

logger = logging.getLogger("taskiq_fanin")

#: The clients the library works with: one server (or Sentinel's), or a cluster.
RedisClient = Redis | RedisCluster

#: Tries of one command (or pipeline) the client makes on its own.
CLIENT_RETRIES = 3
#: Its backoff: from this many seconds, doubling, capped.
CLIENT_BACKOFF_BASE, CLIENT_BACKOFF_CAP = 0.05, 1.0
#: Seconds a connection may sit idle before it is checked with a PING.
HEALTH_CHECK_SECONDS = 30


def _retry() -> Retry:
    return Retry(
        ExponentialWithJitterBackoff(cap=CLIENT_BACKOFF_CAP, base=CLIENT_BACKOFF_BASE),
        CLIENT_RETRIES,
        supported_errors=(RedisConnectionError, RedisTimeoutError),
    )


def connect(
    url: str, *, max_connections: int, socket_timeout: float, cluster: bool = False
) -> RedisClient:
    """A client for ``url`` with the settings above: a cluster's if ``cluster``."""
    common = {
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": socket_timeout,
        "socket_keepalive": True,
        "health_check_interval": HEALTH_CHECK_SECONDS,
        "retry": _retry(),
    }
    if cluster:
        return RedisCluster.from_url(url, max_connections=max_connections, **common)
    if is_sentinel_url(url):
        return sentinel_client(
            url,
            max_connections=max_connections,
            timeout=socket_timeout * 2,
            common=common,
        )
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        # Wait for a free connection about as long as a command may take.
        timeout=socket_timeout * 2,
        **common,
    )
    return Redis.from_pool(pool)  # closing the client closes its pool


async def set_up(client: RedisClient) -> None:
    """Learn a cluster's slots now, before several callers use the client at once.

    redis-py's ``RedisCluster`` sets itself up on its first command; several
    commands issued together on a fresh client fail some of their callers
    (``AttributeError``, seen about once in ten bursts of ten). A cluster that
    cannot be reached yet is not an error here: the client sets itself up on
    its first command then, and that command's caller hears of any failure.
    """
    if not isinstance(client, RedisCluster):
        return
    try:
        await client.initialize()
    except (RedisError, RedisClusterException, OSError) as exc:
        logger.warning(
            "Redis Cluster not reachable at startup (%s): set up on first use", exc
        )


def without_password(url: str) -> str:
    """``url`` as a log or an error may show it: its password replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def where(client: RedisClient) -> str:
    """Where a client's Redis is, for an error: its URL's parts, no password."""
    if isinstance(client, RedisCluster):
        nodes = sorted(client.nodes_manager.startup_nodes)
        return "a Redis Cluster at " + ", ".join(nodes[:3])
    kwargs = client.connection_pool.connection_kwargs
    service = getattr(client.connection_pool, "service_name", None)
    if service is not None:
        return f"the primary {service!r} of its sentinels"
    if "path" in kwargs:
        return f"unix://{kwargs['path']}"
    return f"redis://{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


async def reachable(client: RedisClient, *, within: float, name: str = "") -> None:
    """Return once Redis answers; ``RedisUnreachableError`` if not within ``within`` s.

    One PING (with the client's own few retries), or a cluster's slots learned:
    a refused connection says so at once, a host that never answers once
    ``within`` has passed. ``name``: where Redis is, as the error says it (a
    URL without its password); else read from the client.
    """
    try:
        if isinstance(client, RedisCluster):
            await asyncio.wait_for(client.initialize(), within)
        else:
            await asyncio.wait_for(client.ping(), within)
    # asyncio.TimeoutError: not the built-in one on Python 3.10.
    except (RedisError, RedisClusterException, OSError, asyncio.TimeoutError) as err:
        reason = str(err) or f"no answer ({type(err).__name__})"
        raise RedisUnreachableError(
            where=name or where(client), seconds=within, reason=reason
        ) from err
