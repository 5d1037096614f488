"""A chain's arguments are held to ``max_member_bytes`` as a group's are: a big
argument in any step, its undo or its ``on_error`` is refused at ``kiq()``, with
nothing written to Redis and nothing sent (every message carries the plan).
"""

from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from taskiq_redis import RedisStreamBroker

from taskiq_fanin import MemberTooLargeError, Signature, chain
from tests.harness import SentMessages, stream_broker

BIG = "x" * 200_000


@pytest.fixture
async def started(
    redis_url: str, key_prefix: str
) -> AsyncIterator[tuple[RedisStreamBroker, SentMessages]]:
    sent = SentMessages()
    broker, _ = stream_broker(redis_url, key_prefix, sent)
    await broker.startup()
    yield broker, sent
    await broker.shutdown()


async def _written(redis_client: Redis, key_prefix: str) -> list[bytes]:
    """Every key under the test's prefix but the broker's empty stream (its
    consumer group is declared at startup)."""
    stream = f"{key_prefix}:stream"
    assert await redis_client.xlen(stream) == 0, "a message was sent"
    keys = [key async for key in redis_client.scan_iter(f"{key_prefix}*")]
    return [key for key in keys if key != stream.encode()]


@pytest.mark.parametrize(("position", "what"), [(0, "Step 0"), (2, "Step 2")])
async def test_a_big_argument_in_any_step_is_refused_and_nothing_is_written(
    started: tuple[RedisStreamBroker, SentMessages],
    redis_client: Redis,
    key_prefix: str,
    position: int,
    what: str,
) -> None:
    broker, sent = started

    @broker.task
    async def step(value: object, extra: object = None) -> str:
        return "done"

    steps = [Signature.of(step, "a"), Signature.of(step), Signature.of(step)]
    steps[position] = Signature.of(step, BIG).immutable()
    with pytest.raises(MemberTooLargeError, match=f"^{what} of the chain") as raised:
        await chain(*steps).kiq(broker)

    assert "pass a reference" in str(raised.value)
    assert sent.sent == []
    assert await _written(redis_client, key_prefix) == []
