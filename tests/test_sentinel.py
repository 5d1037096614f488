"""Sentinel, first class: the ``redis+sentinel://`` URL, a ``master_for`` client,
and the errors of a failover counted as Redis being away.

The failover under load is ``tests/test_sentinel_failover.py``; here a real
primary, replica and three sentinels carry a group and a chain through the
library's client built from the URL, and through a caller's ``master_for``.
"""

import asyncio
import gc
import json
import subprocess
import sys
import uuid

import pytest
from redis.asyncio import Redis, Sentinel
from redis.asyncio.sentinel import MasterNotFoundError
from redis.exceptions import ReadOnlyError
from taskiq.exceptions import SendTaskError
from taskiq_redis import RedisStreamBroker, RedisStreamSentinelBroker

from local_redis import RedisSentinel, eventually
from taskiq_fanin import FanInMiddleware, GroupResult, Signature, group
from taskiq_fanin.domain.exceptions import InvalidOptionError
from taskiq_fanin.transport.client import connect
from taskiq_fanin.transport.paced_kicks import SENTINEL_KICKS, PacedBroker, kick_limit
from taskiq_fanin.transport.queue_kicks import kicking_broker
from taskiq_fanin.transport.retrying import is_transient
from taskiq_fanin.transport.sentinel import (
    SENTINEL_PORT,
    SentinelAddress,
    parse_sentinel_url,
)
from tests.harness import close_sentinels, worker


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "redis+sentinel://s1:26380,s2/mymaster",
            SentinelAddress((("s1", 26380), ("s2", SENTINEL_PORT)), "mymaster"),
        ),
        (
            "redis+sentinel://:p%40ss@127.0.0.1:5000/primary/3",
            SentinelAddress((("127.0.0.1", 5000),), "primary", 3, None, "p@ss"),
        ),
        (
            "REDIS+SENTINEL://me:pw@[::1]:26379,[::1]/m/",
            SentinelAddress((("::1", 26379), ("::1", 26379)), "m", 0, "me", "pw"),
        ),
    ],
)
def test_a_sentinel_url_names_the_sentinels_the_primary_and_the_db(
    url: str, expected: SentinelAddress
) -> None:
    assert parse_sentinel_url(url) == expected


@pytest.mark.parametrize(
    "url",
    [
        "redis+sentinel://",
        "redis+sentinel:///mymaster",
        "redis+sentinel://s1:26379",
        "redis+sentinel://s1:26379/",
        "redis+sentinel://s1:port/m",
        "redis+sentinel://s1:0/m",
        "redis+sentinel://s1,,s2/m",
        "redis+sentinel://s1/m/zero",
        "redis+sentinel://s1/m/0/extra",
        "redis+sentinel://s1/m?ssl=true",
        "redis+sentinel://[::1/m",
    ],
)
def test_a_bad_sentinel_url_is_refused_with_its_form(url: str) -> None:
    with pytest.raises(InvalidOptionError, match=r"redis\+sentinel://\[\[user\]"):
        parse_sentinel_url(url)


def test_a_bad_sentinel_url_fails_the_middleware_at_startup_not_later() -> None:
    fanin = FanInMiddleware("redis+sentinel://s1:99999/m")
    with pytest.raises(InvalidOptionError, match="s1:99999"):
        asyncio.run(fanin.startup())


def test_the_error_never_shows_the_password() -> None:
    with pytest.raises(InvalidOptionError) as raised:
        parse_sentinel_url("redis+sentinel://user:secret@s1")
    assert "secret" not in str(raised.value)


@pytest.mark.parametrize(
    "error",
    [
        ReadOnlyError("You can't write against a read only replica."),
        MasterNotFoundError("No master found for 'mymaster'"),
    ],
)
def test_a_failovers_errors_are_redis_being_away(error: Exception) -> None:
    assert is_transient(error)
    # A kick wraps what the broker raised (taskiq's SendTaskError).
    wrapped = SendTaskError()
    wrapped.__cause__ = error
    assert is_transient(wrapped)


async def _group_through(
    sentinel: RedisSentinel,
    fanin_redis: str | Redis,
    count: int = 10,
    prefix: str | None = None,
) -> list[GroupResult]:
    """A group of ``count`` members through a sentinel broker and worker."""
    prefix = prefix or f"t-{uuid.uuid4().hex[:8]}"
    broker = RedisStreamSentinelBroker(
        sentinel.sentinels,
        sentinel.master_name,
        queue_name=f"{prefix}:stream",
        xread_block=100,
    )
    broker.with_middlewares(FanInMiddleware(fanin_redis, prefix=prefix))
    seen: list[GroupResult] = []

    @broker.task(task_name=f"{prefix}.double")
    async def double(x: int) -> int:
        return 2 * x

    @broker.task(task_name=f"{prefix}.collect")
    async def collect(result: GroupResult) -> None:
        seen.append(result)

    try:
        async with worker(broker, max_async_tasks=10):
            members = [Signature.of(double, i) for i in range(count)]
            await group(members, then=Signature.of(collect)).kiq(broker)
            await eventually(lambda: bool(seen), what="the continuation")
    finally:
        await close_sentinels(broker.sentinel)  # taskiq-redis leaves them open
        gc.collect()  # a connection left open shows here, in this test
    return seen


async def test_the_middleware_works_from_a_sentinel_url() -> None:
    with RedisSentinel() as sentinel:
        (result,) = await _group_through(sentinel, sentinel.url)
    assert result.results == [2 * i for i in range(10)]


async def test_the_command_line_reads_through_a_sentinel_url() -> None:
    with RedisSentinel() as sentinel:
        (result,) = await _group_through(sentinel, sentinel.url, prefix="cli-s")
        where = ["--redis-url", sentinel.url, "--prefix", "cli-s"]
        command = [sys.executable, "-m", "taskiq_fanin.cli", "--json", *where]
        done = await asyncio.to_thread(
            subprocess.run,
            [*command, "status", result.group_id],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    assert (shown["state"], shown["done"]) == ("completed", 10), shown


async def test_the_middleware_works_with_a_master_for_client() -> None:
    with RedisSentinel() as sentinel:
        manager = Sentinel(sentinel.sentinels)  # type: ignore[no-untyped-call]
        client = manager.master_for(sentinel.master_name)
        try:
            (result,) = await _group_through(sentinel, client)
        finally:
            await client.aclose()
            await close_sentinels(manager)
    assert result.results == [2 * i for i in range(10)]


async def test_the_librarys_sentinel_client_rides_a_failover_in_its_own_retries() -> (
    None
):
    with RedisSentinel() as sentinel:
        client = connect(sentinel.url, max_connections=4, socket_timeout=2.0)
        try:
            await client.set("before", 1)
            old = sentinel.primary.port
            promoted = sentinel.kill_primary()
            # The first command after the failover reconnects to the promoted
            # replica: its pooled connection asks a sentinel again.
            await client.set("after", 1)
            assert promoted.port != old
            assert (await client.info("server"))["tcp_port"] == promoted.port
            assert await client.get("before") == b"1"
        finally:
            await client.aclose()


def test_kicks_on_a_sentinel_broker_are_paced_and_others_not() -> None:
    sentinel_broker = RedisStreamSentinelBroker([("127.0.0.1", 1)], "m")
    assert kick_limit(sentinel_broker) == SENTINEL_KICKS
    assert isinstance(kicking_broker(sentinel_broker), PacedBroker)
    assert kick_limit(RedisStreamBroker("redis://127.0.0.1:1/0")) is None


async def test_planning_20_groups_at_once_on_a_sentinel_broker_kicks_every_member() -> (
    None
):
    """With 64 kicks in flight per planner, 20 planners raced 1,280 kicks for
    the sentinels' 100 connections: most failed with no fault at all."""
    with RedisSentinel() as sentinel:
        prefix = f"t-{uuid.uuid4().hex[:8]}"
        broker = RedisStreamSentinelBroker(
            sentinel.sentinels, sentinel.master_name, queue_name=f"{prefix}:stream"
        )
        broker.with_middlewares(FanInMiddleware(sentinel.url, prefix=prefix))

        @broker.task(task_name=f"{prefix}.member")
        async def member(x: int) -> int:
            return x

        await broker.startup()
        try:
            groups = [
                group([Signature.of(member, i) for i in range(100)]).kiq(broker)
                for _ in range(20)
            ]
            await asyncio.gather(*groups)
            client = Redis(port=sentinel.primary.port)
            try:
                kicked = await client.xlen(f"{prefix}:stream")
            finally:
                await client.aclose()
        finally:
            await broker.shutdown()
            await close_sentinels(broker.sentinel)
    assert kicked == 2000
