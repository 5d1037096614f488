"""Which Redis the benchmarks run on, and the few things they ask it.

``REDIS_URL`` when it is set; otherwise a throwaway ``redis-server`` on a free
loopback port when the binary is on PATH; otherwise an embedded fakeredis TCP
server. Whatever is started here is stopped here. Nothing is ever flushed: each
run deletes exactly the keys under its own prefix.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from benchmarks.apps.common import CONSUMER_GROUP
from local_redis import LOOPBACK, REDIS_URL_ENV, RedisServer, free_port

#: SCAN page size when deleting a run's keys.
_DELETE_BATCH = 500

#: Default poll interval of :func:`wait_until`; short next to any timed run.
POLL_SECONDS = 0.01


@dataclass
class RedisProvider:
    """The Redis every benchmark uses, and a way to get a second one.

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
    """Yield the benchmarks' Redis (see the module docstring).

    ``force`` is ``auto``, ``server`` (a redis-server even if REDIS_URL is set)
    or ``fake`` (fakeredis even if redis-server is installed), for testing the
    fallbacks.
    """
    url = os.environ.get(REDIS_URL_ENV, "").strip()
    if url and force == "auto":
        yield RedisProvider(url=url, kind="REDIS_URL")
        return
    if force != "fake" and shutil.which("redis-server"):
        with RedisServer() as server:
            yield RedisProvider(
                url=server.url, kind="redis-server", version=_server_version(server)
            )
        return
    with fake_server() as fake_url:
        yield RedisProvider(url=fake_url, kind="fakeredis")


def _server_version(server: RedisServer) -> str:
    import redis  # noqa: PLC0415 - only for this one synchronous call

    client = redis.Redis.from_url(server.url)
    try:
        return str(client.info("server").get("redis_version", ""))
    finally:
        client.close()


@contextlib.contextmanager
def fake_server() -> Iterator[str]:
    """An embedded fakeredis TCP server on a free loopback port."""
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


async def wait_until(
    condition: Callable[[], Awaitable[bool]],
    *,
    timeout: float,
    interval: float = POLL_SECONDS,
    check: Callable[[], None] | None = None,
) -> bool:
    """Poll ``condition`` until it holds (True) or ``timeout`` passes (False).

    ``check`` runs on every poll and may raise (a worker that died).
    """
    deadline = time.monotonic() + timeout
    while True:
        if check is not None:
            check()
        if await condition():
            return True
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(interval)


def _field(info: dict[Any, Any], name: str) -> Any:
    value = info.get(name, info.get(name.encode()))
    return value.decode() if isinstance(value, bytes) else value


async def stream_drained(client: Redis, queue: str, entries: int) -> bool:
    """All ``entries`` are in the stream, delivered and acknowledged.

    XLEN counts what was added (nothing trims these streams); the consumer group's
    last-delivered id equals the stream's last id (lag 0) and nothing is pending.
    """
    if await client.xlen(queue) < entries:
        return False
    try:
        groups = await client.xinfo_groups(queue)
        stream = await client.xinfo_stream(queue)
    except ResponseError:
        return False
    group = next((g for g in groups if _field(g, "name") == CONSUMER_GROUP), None)
    if group is None:
        return False
    last = _field(stream, "last-generated-id")
    return (
        int(_field(group, "pending")) == 0
        and _field(group, "last-delivered-id") == last
    )


async def delete_keys(url: str, prefix: str, *names: str) -> None:
    """Delete every key under ``prefix`` and the keys ``names`` (never FLUSHDB)."""
    client = Redis.from_url(url)
    try:
        batch: list[Any] = list(names)
        async for key in client.scan_iter(match=f"{prefix}*", count=_DELETE_BATCH):
            batch.append(key)
            if len(batch) >= _DELETE_BATCH:
                await client.delete(*batch)
                batch.clear()
        if batch:
            await client.delete(*batch)
    finally:
        await client.aclose()
