"""A Sentinel-managed primary named by a URL, and the client the library builds for it.

The URL form (redis-py and taskiq-redis have none; this is the one of the
``redis-sentinel-url`` package and of several other ecosystems)::

    redis+sentinel://[[user]:password@]host[:port][,host[:port]...]/<master name>[/<db>]

- the hosts are the sentinels (port 26379 when left out), tried in order, as
  taskiq-redis's ``RedisStreamSentinelBroker(sentinels=[...], master_name=...)``
  takes them;
- the master name is the one in the sentinels' ``sentinel monitor`` line;
- the credentials, if any, are the primary's; the sentinels are asked without
  them (pass a client of your own for sentinels that need a password, or TLS).

Every connection to the primary asks a sentinel where it is: after a failover
the client reconnects to the promoted replica, and a demoted primary's
``READONLY`` reply closes the connection (redis-py's
``SentinelManagedConnection``), so the hooks' retries reach the new primary.
"""

from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.sentinel import (
    Sentinel,
    SentinelConnectionPool,
    SentinelManagedConnection,
)

from taskiq_fanin.domain.exceptions import InvalidOptionError, shown

SCHEME = "redis+sentinel://"
#: The port a sentinel listens on unless told otherwise.
SENTINEL_PORT = 26379
#: The URL form, as the errors quote it.
FORM = (
    "redis+sentinel://[[user]:password@]host[:port][,host[:port]...]"
    "/<master name>[/<db>]"
)


@dataclass(frozen=True)
class SentinelAddress:
    """Where the sentinels are, and which primary of theirs to use."""

    sentinels: tuple[tuple[str, int], ...]
    master_name: str
    db: int = 0
    username: str | None = None
    password: str | None = None


def is_sentinel_url(url: str) -> bool:
    """Whether ``url`` names a Sentinel-managed primary (``redis+sentinel://``)."""
    return url.lower().startswith(SCHEME)


def _bad(url: str, reason: str) -> InvalidOptionError:
    hidden = url.split("@", 1)[-1] if "@" in url else url  # never echo a password
    return InvalidOptionError(
        name="redis", value=shown(hidden), reason=f"{reason}; the form is {FORM}"
    )


def _host_port(url: str, part: str) -> tuple[str, int]:
    host, port = part, str(SENTINEL_PORT)
    if part.startswith("["):  # [::1]:26379
        host, closed, rest = part[1:].partition("]")
        if not closed:
            raise _bad(url, f"cannot read the sentinel {part!r}")
        if rest:
            if not rest.startswith(":"):
                raise _bad(url, f"cannot read the sentinel {part!r}")
            port = rest[1:]
    elif ":" in part:
        host, port = part.rsplit(":", 1)
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise _bad(url, f"cannot read the sentinel {part!r} as host[:port]")
    return host, int(port)


def parse_sentinel_url(url: str) -> SentinelAddress:
    """Read a ``redis+sentinel://`` URL, or raise ``InvalidOptionError``.

    Nothing is connected: a bad URL fails before the broker starts.
    """
    if not is_sentinel_url(url):
        raise _bad(url, "not a redis+sentinel:// URL")
    rest = url[len(SCHEME) :]
    if "?" in rest or "#" in rest:
        raise _bad(url, "options in a query string are not read")
    netloc, _, path = rest.partition("/")
    username = password = None
    if "@" in netloc:
        credentials, netloc = netloc.rsplit("@", 1)
        user, has_password, secret = credentials.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if has_password else None
    if not netloc:
        raise _bad(url, "no sentinel named")
    sentinels = tuple(_host_port(url, part) for part in netloc.split(","))
    parts = path.split("/") if path else []
    if parts and parts[-1] == "":
        parts.pop()  # a trailing slash
    if not parts or not parts[0]:
        raise _bad(url, "no master name")
    if len(parts) > 2:
        raise _bad(url, "too many parts after the sentinels")
    db = parts[1] if len(parts) == 2 else "0"
    if not db.isdigit():
        raise _bad(url, f"the database {db!r} is not a number")
    return SentinelAddress(
        sentinels=sentinels,
        master_name=unquote(parts[0]),
        db=int(db),
        username=username,
        password=password,
    )


class PrimaryConnection(SentinelManagedConnection):
    """A connection to the primary that asks a sentinel again on every reconnect.

    redis-py's own asks only when the pool hands out a closed connection; its
    retries of a command reconnect to the address it had (the dead primary's),
    so without this every retry of the client would hit the same closed port.
    """

    async def connect_check_health(
        self, check_health: bool = True, retry_socket_connect: bool = True
    ) -> None:
        """Connect to where the sentinels say the primary is now."""
        pool = self.connection_pool
        if not self.is_connected and pool.is_master:
            self.host, self.port = await pool.get_master_address()
        await super().connect_check_health(
            check_health=check_health, retry_socket_connect=retry_socket_connect
        )


class BlockingSentinelPool(SentinelConnectionPool, BlockingConnectionPool):
    """Sentinel's pool that makes a caller past ``max_connections`` wait, not fail.

    As the blocking pool of the library's plain client (``transport/client.py``).
    """


class SentinelRedis(Redis):
    """The primary's client; closing it closes the clients of its sentinels too."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        """Close the connections to the primary, then those to the sentinels."""
        await super().aclose(close_connection_pool)
        pool = self.connection_pool
        if isinstance(pool, SentinelConnectionPool):
            for sentinel in pool.sentinel_manager.sentinels:
                await sentinel.aclose()


def sentinel_client(
    url: str, *, max_connections: int, timeout: float, common: dict[str, Any]
) -> Redis:
    """The primary behind ``url``, through its sentinels, with ``common`` settings.

    ``common``: the socket, health-check and retry settings of every client of
    the library; the sentinels are asked with the same. ``timeout``: how long a
    caller waits for a free connection.
    """
    address = parse_sentinel_url(url)
    sentinel = Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
        list(address.sentinels), sentinel_kwargs=dict(common)
    )
    client: Redis = sentinel.master_for(
        address.master_name,
        redis_class=SentinelRedis,
        connection_class=PrimaryConnection,
        connection_pool_class=BlockingSentinelPool,
        db=address.db,
        username=address.username,
        password=address.password,
        max_connections=max_connections,
        timeout=timeout,
        **common,
    )
    return client
