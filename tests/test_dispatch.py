"""The library's kicks share pipelines on taskiq-redis's queue brokers, and write
exactly what the broker's own ``kick`` would.
"""

import asyncio
from typing import Any

import pytest
from redis.asyncio import Redis
from taskiq import BrokerMessage, InMemoryBroker, TaskiqMessage, TaskiqMiddleware
from taskiq.exceptions import SendTaskError
from taskiq_redis import ListQueueBroker, RedisStreamBroker

from taskiq_fanin import FanInMiddleware, Signature, group
from taskiq_fanin.batching import PipelineBatcher
from taskiq_fanin.dispatch import PipelinedBroker, kicking_broker
from tests.harness import LossyStreamBroker, stream_broker


def test_only_queue_brokers_with_their_own_kick_are_pipelined(redis_url: str) -> None:
    assert isinstance(kicking_broker(RedisStreamBroker(redis_url)), PipelinedBroker)
    assert isinstance(kicking_broker(ListQueueBroker(redis_url)), PipelinedBroker)
    # A kick of its own is respected: the library kicks through it.
    lossy = LossyStreamBroker(redis_url)
    assert kicking_broker(lossy) is lossy
    memory = InMemoryBroker()
    assert kicking_broker(memory) is memory


def _message(task_id: str, **labels: Any) -> BrokerMessage:
    return BrokerMessage(
        task_id=task_id,
        task_name="t",
        message=f'{{"task_id": "{task_id}"}}'.encode(),
        labels=labels,
    )


@pytest.mark.parametrize(("maxlen", "approximate"), [(None, True), (2, False)])
async def test_a_pipelined_stream_kick_writes_what_the_brokers_kick_writes(
    redis_client: Redis,
    redis_url: str,
    key_prefix: str,
    maxlen: int | None,
    approximate: bool,
) -> None:
    written: dict[str, list[list[dict[bytes, bytes]]]] = {}
    for way in ("own", "pipelined"):
        broker = RedisStreamBroker(
            redis_url,
            queue_name=f"{key_prefix}:{way}",
            maxlen=maxlen,
            approximate=approximate,
        )
        labelled = f"{key_prefix}:{way}:labelled"
        kick = broker.kick if way == "own" else kicking_broker(broker).kick
        try:
            for name in "abc":
                await kick(_message(name))
            await kick(_message("d", queue_name=labelled))
        finally:
            await broker.shutdown()
        written[way] = [
            [fields for _, fields in await redis_client.xrange(stream)]
            for stream in (broker.queue_name, labelled)
        ]
    assert written["pipelined"] == written["own"]
    kept = "abc"[-maxlen:] if maxlen else "abc"
    assert written["own"] == [
        [{b"data": f'{{"task_id": "{n}"}}'.encode()} for n in kept],
        [{b"data": b'{"task_id": "d"}'}],
    ]


async def test_a_pipelined_list_kick_writes_what_the_brokers_kick_writes(
    redis_client: Redis, redis_url: str, key_prefix: str
) -> None:
    broker = ListQueueBroker(redis_url, queue_name=f"{key_prefix}:list")
    try:
        await broker.kick(_message("a"))
        await kicking_broker(broker).kick(_message("b"))
        entries = await redis_client.lrange(broker.queue_name, 0, -1)
    finally:
        await broker.shutdown()
    assert entries == [b'{"task_id": "b"}', b'{"task_id": "a"}']


class SendLog(TaskiqMiddleware):
    """Checks, in post_send, that the message is already in the stream."""

    def __init__(self, client: Redis, stream: str) -> None:
        super().__init__()
        self.client = client
        self.stream = stream
        self.before: list[str] = []
        self.after_and_found: list[str] = []

    def pre_send(self, message: TaskiqMessage) -> TaskiqMessage:
        self.before.append(message.task_id)
        return message

    async def post_send(self, message: TaskiqMessage) -> None:
        entries = await self.client.xrange(self.stream)
        if any(message.task_id.encode() in fields[b"data"] for _, fields in entries):
            self.after_and_found.append(message.task_id)


async def test_a_groups_members_share_pipelines_and_each_runs_the_middlewares(
    redis_url: str,
    redis_client: Redis,
    key_prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    size = 120
    log = SendLog(redis_client, f"{key_prefix}:stream")
    broker, fanin = stream_broker(redis_url, key_prefix, log)
    batches: list[tuple[PipelineBatcher, int]] = []
    send = PipelineBatcher._send

    async def counting_send(self: PipelineBatcher, batch: list[Any]) -> None:
        batches.append((self, len(batch)))
        await send(self, batch)

    monkeypatch.setattr(PipelineBatcher, "_send", counting_send)

    @broker.task
    async def member(index: int) -> None:
        return None

    await broker.startup()
    kicks = fanin.kicking_broker
    assert isinstance(kicks, PipelinedBroker)
    try:
        handle = await group([Signature.of(member, i) for i in range(size)]).kiq(broker)
    finally:
        await broker.shutdown()
    pipelines = [size for batcher, size in batches if batcher is kicks._batcher]
    ids = {f"{handle.group_id}.{index}" for index in range(size)}
    assert set(log.before) == ids
    assert set(log.after_and_found) == ids  # post_send came after Redis had it
    assert await redis_client.xlen(f"{key_prefix}:stream") == size
    # Kicks in flight together went together: far fewer pipelines than members.
    assert sum(pipelines) == size
    assert len(pipelines) <= size // 10


async def test_a_kick_redis_refuses_fails_alone(
    redis_url: str, redis_client: Redis, key_prefix: str
) -> None:
    broker = RedisStreamBroker(redis_url, queue_name=f"{key_prefix}:stream")
    fanin = FanInMiddleware(redis_url, prefix=key_prefix)
    broker.with_middlewares(fanin)
    not_a_stream = f"{key_prefix}:string"
    await redis_client.set(not_a_stream, "x")

    @broker.task
    async def job() -> None:
        return None

    await broker.startup()
    try:
        kicker = fanin.kicking_broker
        refused, sent = await asyncio.gather(
            Signature.of(job).with_labels(queue_name=not_a_stream).kicker(kicker).kiq(),
            Signature.of(job).kicker(kicker).kiq(),
            return_exceptions=True,
        )
    finally:
        await broker.shutdown()
    assert isinstance(refused, SendTaskError)
    assert not isinstance(sent, BaseException)
    assert await redis_client.xlen(broker.queue_name) == 1
