"""A queue no worker with the middleware serves is made visible at planning, on
a real redis-server: a worker without the middleware would run the members and
record nothing, and the group would sit at 0 of N until its deadline."""

import logging

import pytest
from redis.asyncio import Redis

from taskiq_fanin import Signature, chain, group
from taskiq_fanin.groups import workers_seen
from taskiq_fanin.storage.keys import workers_key
from tests.harness import stream_broker

NO_WORKER = "no worker with FanInMiddleware seen on queue"


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers_seen, "_warned", {})


async def test_planning_onto_a_queue_no_worker_serves_warns_once_naming_the_fix(
    redis_url: str, key_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix)

    @broker.task
    async def resize(image: int) -> None: ...

    await broker.startup()
    try:
        with caplog.at_level(logging.WARNING, logger="taskiq_fanin"):
            for attempt in range(3):
                await group([Signature.of(resize, 1)], group_id=f"g{attempt}").kiq(
                    broker
                )
            await chain(Signature.of(resize, 2), chain_id="c").kiq(broker)
    finally:
        await broker.shutdown()

    warned = [r.message for r in caplog.records if NO_WORKER in r.message]
    assert len(warned) == 1  # once a queue, however many plan
    assert f"queue '{key_prefix}:stream'" in warned[0]
    assert "add FanInMiddleware to the worker's broker" in warned[0]


async def test_a_queue_a_worker_announced_is_planned_onto_silently(
    redis_url: str, key_prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix)

    @broker.task
    async def resize(image: int) -> None: ...

    async with Redis.from_url(redis_url) as client:  # as a worker's heartbeat does
        await client.set(
            workers_key(key_prefix, f"{key_prefix}:stream"), "w", px=30_000
        )
    await broker.startup()
    try:
        with caplog.at_level(logging.WARNING, logger="taskiq_fanin"):
            await group([Signature.of(resize, 1)]).kiq(broker)
    finally:
        await broker.shutdown()

    assert not [r for r in caplog.records if NO_WORKER in r.message]
