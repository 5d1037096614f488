"""How a caller's verbs give up on Redis away, and what counts as Redis away.

``cancel()`` rides each of its phases (finding the id, cancelling, reading the
state when a try failed) within one ``retry_for``; a verb that gives up says so
once, as a warning, and raises (its caller reports the error, with its
traceback); a sweep that lost the lock to another is skipped, even when its
replicas are away. On fakeredis.
"""

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException
from taskiq import InMemoryBroker

from taskiq_fanin import FanInMiddleware, cancel, sweep
from taskiq_fanin.api import control, retries
from taskiq_fanin.api.control import Kind
from taskiq_fanin.storage.keys import sweep_lock_key
from taskiq_fanin.transport.retrying import is_transient
from tests.fake_replicas import Refusing, RefusingRedis

RETRY_FOR = 0.6


@pytest.fixture
async def broker() -> AsyncIterator[InMemoryBroker]:
    client = RefusingRedis()
    client.replicas = Refusing()
    fanin = FanInMiddleware(
        client, prefix="gu", durability="replicated", replication_timeout=0.05,
        retry_for=RETRY_FOR,
    )  # fmt: skip
    made = InMemoryBroker().with_middlewares(fanin)
    made.client = client  # type: ignore[attr-defined]
    await made.startup()
    try:
        yield made
    finally:
        await made.shutdown()
        await client.flushall()
        await client.aclose()


async def test_cancel_rides_its_phases_within_one_retry_for(
    broker: InMemoryBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop = asyncio.get_running_loop()
    began = loop.time()

    async def found_late(ctx: Any, workflow_id: str) -> Kind:
        if loop.time() - began < RETRY_FOR * 0.8:
            raise RedisConnectionError("Redis away")
        return Kind.GROUP

    async def away(ctx: Any, group_id: str) -> bool:
        raise RedisConnectionError("Redis away")

    monkeypatch.setattr(control, "resolve", found_late)
    monkeypatch.setattr(retries, "cancel_group", away)
    with pytest.raises(RedisConnectionError):
        await cancel(broker, "g")

    assert loop.time() - began < RETRY_FOR * 1.4


async def test_a_caller_verb_giving_up_warns_once_without_a_traceback(
    broker: InMemoryBroker,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def away(ctx: Any, workflow_id: str) -> Kind:
        raise RedisConnectionError("Redis away")

    monkeypatch.setattr(control, "resolve", away)
    with (
        caplog.at_level(logging.WARNING, logger="taskiq_fanin"),
        pytest.raises(RedisConnectionError),
    ):
        await cancel(broker, "g")

    gave_up = [r for r in caplog.records if "raised to its caller" in r.getMessage()]
    assert len(gave_up) == 1
    assert gave_up[0].levelno == logging.WARNING
    assert gave_up[0].exc_info is None


async def test_a_sweep_that_lost_the_lock_is_skipped_though_replicas_are_away(
    broker: InMemoryBroker,
) -> None:
    client: RefusingRedis = broker.client  # type: ignore[attr-defined]
    await client.set(sweep_lock_key("gu"), "another sweep", px=60_000)
    client.replicas.refuse = lambda _: True

    report = await sweep(broker)

    assert report.skipped
    assert await client.get(sweep_lock_key("gu")) == b"another sweep"


@pytest.mark.parametrize(
    "message",
    [
        "All slots are not covered after query all startup_nodes. 16000 of 16384 "
        "covered...",
        "startup_nodes could not agree on a valid slots cache: a:1 vs b:2 on slot: 5",
    ],
)
def test_a_cluster_s_slots_refreshed_mid_failover_is_redis_away(message: str) -> None:
    assert is_transient(RedisClusterException(message))


def test_other_cluster_client_errors_are_not_redis_away() -> None:
    assert not is_transient(RedisClusterException("shard_hint is deprecated"))
