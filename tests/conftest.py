"""Shared fixtures: a real Redis (started on demand), a fake one, and key isolation.

Tests never flush a database. Each test gets its own ``key_prefix`` and keeps every
key it writes under it; ``redis_client`` deletes exactly those keys afterwards, so
the suite is also safe against a shared server named by ``REDIS_URL``.

Each test is marked with what it needs (``redis_server``, ``workers``,
``cluster``: ``tests/needs.py``), and fails if it starts one unmarked.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from fakeredis.aioredis import FakeRedis
from redis.asyncio import Redis

from local_redis import RedisCluster, delete_keys, redis_url_from_env_or_server
from tests.needs import NeedGuard, needs_of_item


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with what it needs, read from what it uses."""
    for item in items:
        for need in sorted(needs_of_item(item)):
            item.add_marker(need)


@pytest.fixture(autouse=True)
def need_guard(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[NeedGuard]:
    """Fail a test that starts a server or a worker it is not marked as needing."""
    marks = frozenset(mark.name for mark in request.node.iter_markers())
    guard = NeedGuard(request.node.nodeid, marks)
    guard.install(monkeypatch)
    yield guard
    if guard.violations:
        pytest.fail("\n".join(guard.violations), pytrace=False)


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """``$REDIS_URL``, or a redis-server started once for the whole session.

    A missing ``redis-server`` is an error, not a skip: the message says how to
    install it.
    """
    with redis_url_from_env_or_server() as url:
        yield url


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    """URL of one node of a 3-master Redis Cluster, started on first use."""
    with RedisCluster() as cluster:
        yield cluster.url


@pytest.fixture
def key_prefix() -> str:
    """A prefix unique to this test; every key a test writes starts with it."""
    return f"t-{uuid.uuid4().hex[:12]}"


@pytest.fixture
async def redis_client(redis_url: str, key_prefix: str) -> AsyncIterator[Redis]:
    """A ``redis.asyncio`` client (bytes replies) on the test server.

    Afterwards the keys under ``key_prefix`` are deleted (SCAN, never FLUSHDB),
    through a fresh connection so a test that closed or broke its client still
    cleans up.
    """
    client = Redis.from_url(redis_url, decode_responses=False)
    try:
        yield client
    finally:
        await client.aclose()
        await delete_keys(redis_url, key_prefix)


@pytest.fixture
async def fake_redis() -> AsyncIterator[FakeRedis]:
    """An in-process fakeredis client of its own; runs Lua scripts through lupa."""
    client = FakeRedis()
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture(
    params=["fakeredis", pytest.param("redis-server", marks=pytest.mark.redis_server)]
)
def client(request: pytest.FixtureRequest, fake_redis: FakeRedis) -> Redis:
    """The same test on fakeredis (real Lua through lupa) and on a real server.

    The server is asked for only by the second: the first is a fast test.
    """
    if request.param == "fakeredis":
        return fake_redis
    real: Redis = request.getfixturevalue("redis_client")
    return real
