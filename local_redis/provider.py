"""Which Redis a run uses, and the few things tests and benchmarks ask of it.

``REDIS_URL`` when it is set; otherwise a throwaway ``redis-server`` on a free
loopback port; for the benchmarks, when there is no binary either, an embedded
fakeredis TCP server. Whatever is started here is stopped here. Nothing is ever
flushed: callers keep their keys under a prefix of their own and delete exactly
those (:func:`delete_keys`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from local_redis.host import LOOPBACK, free_port
from local_redis.server import REDIS_URL_ENV, RedisServer

#: SCAN page size, and batch size, when deleting keys under a prefix.
_DELETE_BATCH = 500

#: taskiq-redis's default consumer group.
CONSUMER_GROUP = "taskiq"


@contextlib.contextmanager
def redis_url_from_env_or_server() -> Iterator[str]:
    """Yield ``$REDIS_URL`` when it is set, else the URL of a fresh server.

    A server started here is stopped when the block exits; a server named by
    ``REDIS_URL`` is left alone (and never flushed: callers isolate their keys
    with a unique prefix).

    Raises:
        RuntimeError: ``REDIS_URL`` is unset and no server could be started,
            with instructions for installing ``redis-server``.
    """
    url = os.environ.get(REDIS_URL_ENV, "").strip()
    if url:
        yield url
        return
    with RedisServer() as server:
        yield server.url


@dataclass
class RedisProvider:
    """The Redis a benchmark uses, and a way to get a second one.

    ``kind`` is ``"REDIS_URL"``, ``"redis-server"`` or ``"fakeredis"``.
    """

    url: str
    kind: str
    version: str = ""
    _stack: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)

    @property
    def description(self) -> str:
        """The line saying which Redis ran."""
        where = {
            "REDIS_URL": f"REDIS_URL ({self.url})",
            "redis-server": f"a throwaway redis-server {self.version} at {self.url}",
            "fakeredis": f"an embedded fakeredis TCP server at {self.url} (no "
            "redis-server on PATH: timings are not representative)",
        }[self.kind]
        return f"Redis: {where}"

    @property
    def can_monitor(self) -> bool:
        """MONITOR and MEMORY USAGE need a real server."""
        return self.kind != "fakeredis"

    @contextlib.contextmanager
    def second(self) -> Iterator[tuple[str, bool]]:
        """Another server of the same kind: (url, separate).

        With ``REDIS_URL`` there is no second server to start, so this yields the
        same URL and ``separate=False``.
        """
        if self.kind == "REDIS_URL":
            yield self.url, False
        elif self.kind == "redis-server":
            with RedisServer() as server:
                yield server.url, True
        else:
            with fake_server() as url:
                yield url, True


@contextlib.contextmanager
def provide_redis(force: str = "auto") -> Iterator[RedisProvider]:
    """Yield a run's Redis: ``REDIS_URL``, else a redis-server, else fakeredis.

    ``force`` is ``auto``, ``server`` (a redis-server even if REDIS_URL is set)
    or ``fake`` (fakeredis even if redis-server is installed), for trying the
    fallbacks.
    """
    url = os.environ.get(REDIS_URL_ENV, "").strip()
    if url and force == "auto":
        yield RedisProvider(url=url, kind="REDIS_URL")
        return
    if force != "fake" and shutil.which("redis-server"):
        with RedisServer() as server:
            yield RedisProvider(
                url=server.url, kind="redis-server", version=server_version(server.url)
            )
        return
    with fake_server() as fake_url:
        yield RedisProvider(url=fake_url, kind="fakeredis")


def server_version(url: str) -> str:
    """The ``redis_version`` a server reports."""
    client = redis.Redis.from_url(url)
    try:
        info: Mapping[str, object] = client.info("server")
        return str(info.get("redis_version", ""))
    finally:
        client.close()


@contextlib.contextmanager
def fake_server() -> Iterator[str]:
    """An embedded fakeredis TCP server on a free loopback port (its URL)."""
    from fakeredis import TcpFakeServer  # noqa: PLC0415 - only as a fallback

    server = TcpFakeServer((LOOPBACK, free_port()))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        yield f"redis://{host!s}:{port}/0"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


async def delete_keys(url: str, prefix: str, *names: str) -> None:
    """Delete every key under ``prefix`` and the keys ``names`` (never FLUSHDB).

    Through a fresh connection, so a caller that closed or broke its own client
    still cleans up.
    """
    client = Redis.from_url(url)
    try:
        batch: list[str | bytes] = list(names)
        async for key in client.scan_iter(match=f"{prefix}*", count=_DELETE_BATCH):
            batch.append(key)
            if len(batch) >= _DELETE_BATCH:
                await client.unlink(*batch)
                batch.clear()
        if batch:
            await client.unlink(*batch)
    finally:
        await client.aclose()


def _field(info: Mapping[Any, Any], name: str) -> str:
    """A field of an XINFO reply, whether redis-py decoded it or not."""
    value = info.get(name, info.get(name.encode()))
    return value.decode() if isinstance(value, bytes) else str(value)


async def stream_drained(
    client: Redis, stream: str, entries: int = 0, *, group: str = CONSUMER_GROUP
) -> bool:
    """At least ``entries`` are in the stream, each delivered and acknowledged.

    XLEN counts what was added (as long as nothing trims the stream); the
    consumer group's last-delivered id equals the stream's last id (lag 0) and
    nothing is pending. XACK acknowledges a message, not one delivery of it.
    """
    if entries and await client.xlen(stream) < entries:
        return False
    try:
        groups = await client.xinfo_groups(stream)
        info = await client.xinfo_stream(stream)
    except ResponseError:
        return False
    found = next((g for g in groups if _field(g, "name") == group), None)
    if found is None:
        return False
    last = _field(info, "last-generated-id")
    return (
        int(_field(found, "pending")) == 0
        and _field(found, "last-delivered-id") == last
    )
