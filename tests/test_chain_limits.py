"""A chain's arguments are held to ``max_member_bytes`` as a group's are: a big
argument in any step, its undo or its ``on_error`` is refused at ``kiq()``, with
nothing written to Redis and nothing sent (every message carries the plan).
"""

from collections.abc import AsyncIterator

import pytest
from redis.asyncio import Redis
from taskiq_redis import RedisStreamBroker

from taskiq_fanin import ChainHandle, Signature, chain, group
from taskiq_fanin.chains.cursor import CHAIN_LABEL
from taskiq_fanin.errors import ArgumentsMismatchError, MemberTooLargeError
from taskiq_fanin.models import ChainState
from tests.harness import SentMessages, drained, eventually, stream_broker, worker

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


@pytest.mark.parametrize(("position", "what"), [(0, "Step 1"), (2, "Step 3")])
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


@pytest.mark.parametrize(
    ("where", "what"),
    [
        ("on_error", "The chain's on_error"),
        ("compensation", "The compensation of step 2"),
        ("plan", "The chain's plan"),
        ("member", "Step 2 of the chain in member 0"),
    ],
)
async def test_a_big_on_error_undo_or_plan_is_refused_and_nothing_is_written(
    started: tuple[RedisStreamBroker, SentMessages],
    redis_client: Redis,
    key_prefix: str,
    where: str,
    what: str,
) -> None:
    broker, sent = started

    @broker.task
    async def step(value: object, extra: object = None) -> str:
        return "done"

    small = Signature.of(step, "a")
    if where == "on_error":
        spec = chain(small, on_error=Signature.of(step, BIG))
    elif where == "compensation":
        spec = chain(small, small.with_compensation(Signature.of(step, BIG)))
    elif where == "member":
        spec = group([chain(small, Signature.of(step, BIG).immutable())])
    else:
        # Each step fits the 64 KiB cap; the four of them, in every label, do not.
        quarter = "x" * 20_000
        spec = chain(*[Signature.of(step, quarter).immutable()] * 4)
    with pytest.raises(MemberTooLargeError, match=f"^{what} ") as raised:
        await spec.kiq(broker)

    assert "pass a reference" in str(raised.value)
    assert sent.sent == []
    assert await _written(redis_client, key_prefix) == []


async def test_a_chain_refused_for_its_arguments_writes_nothing(
    started: tuple[RedisStreamBroker, SentMessages],
    redis_client: Redis,
    key_prefix: str,
) -> None:
    broker, sent = started

    @broker.task
    async def resize(photo: int) -> int:
        return photo

    with pytest.raises(ArgumentsMismatchError, match=r"^Step 3 of the chain"):
        await chain(
            Signature.of(resize, 1), Signature.of(resize), Signature.of(resize, 1, 2, 3)
        ).kiq(broker)

    assert sent.sent == []
    assert await _written(redis_client, key_prefix) == []


async def test_a_plan_just_under_the_cap_runs_with_its_labels_under_it(
    redis_url: str, key_prefix: str
) -> None:
    sent = SentMessages()
    broker, _ = stream_broker(redis_url, key_prefix, sent, max_member_bytes=8_000)
    ran: list[int] = []

    @broker.task
    async def step(value: str) -> None:
        ran.append(len(value))

    steps = [Signature.of(step, "x" * 1_500).immutable()] * 4
    async with worker(broker, max_async_tasks=1) as receiver:
        handle = await chain(*steps).kiq(broker)
        await eventually(lambda: len(ran) == 4, what="the four steps")
        await eventually(
            lambda: _state_is(handle, ChainState.DONE), what="the chain to end"
        )
        await drained(broker, receiver)

    labels = [len(m.labels.get(CHAIN_LABEL, "")) for m in sent.of_task(step.task_name)]
    assert len(labels) == 4
    assert 0 < max(labels) <= 8_000


async def _state_is(handle: ChainHandle, state: ChainState) -> bool:
    return (await handle.status()).state == state
