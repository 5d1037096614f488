"""The library's kicks share pipelines on taskiq-redis's queue brokers, and write
exactly what the broker's own ``kick`` would.
"""

import asyncio
import time
from typing import Any

import pytest
from redis import Redis as SyncRedis
from redis.asyncio import Redis
from taskiq import BrokerMessage, InMemoryBroker, TaskiqMessage, TaskiqMiddleware
from taskiq.exceptions import SendTaskError
from taskiq_redis import ListQueueBroker, RedisStreamBroker

from taskiq_fanin import FanInMiddleware, Signature, group
from taskiq_fanin.transport.queue_kicks import (
    PipelinedBroker,
    kicking_broker,
    prompt_broker,
    queue_of,
)
from tests.harness import LossyStreamBroker, stream_broker


def test_only_queue_brokers_with_their_own_kick_are_pipelined(redis_url: str) -> None:
    assert isinstance(kicking_broker(RedisStreamBroker(redis_url)), PipelinedBroker)
    assert isinstance(kicking_broker(ListQueueBroker(redis_url)), PipelinedBroker)
    # A kick of its own is respected: the library kicks through it.
    lossy = LossyStreamBroker(redis_url)
    assert kicking_broker(lossy) is lossy
    memory = InMemoryBroker()
    assert kicking_broker(memory) is memory


def test_the_queue_brokers_attributes_the_pipelined_kicks_rely_on_are_there(
    redis_url: str,
) -> None:
    """Fails loudly when taskiq-redis renames what ``queue_of`` reads.

    Should it fail, kicks would still work (one by one, through the broker's own
    ``kick``), but slower: update ``queue_of`` for the new taskiq-redis.
    """
    stream = RedisStreamBroker(
        redis_url, queue_name="jobs", maxlen=7, approximate=False
    )
    found = queue_of(stream)
    assert found is not None, "taskiq-redis's RedisStreamBroker changed"
    assert found.queue_name == "jobs"
    assert found.client.connection_pool is stream.connection_pool
    assert stream.maxlen == 7
    assert stream.approximate is False
    listed = ListQueueBroker(redis_url, queue_name="jobs")
    found = queue_of(listed)
    assert found is not None, "taskiq-redis's ListQueueBroker changed"
    assert found.queue_name == "jobs"
    assert found.client.connection_pool is listed.connection_pool


def test_a_queue_broker_not_as_expected_is_kicked_through_its_own_kick(
    redis_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    broker = RedisStreamBroker(redis_url)
    del broker.maxlen  # as if taskiq-redis had renamed it
    assert queue_of(broker) is None
    assert kicking_broker(broker) is broker
    assert "not as expected" in caplog.text


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
    for way in ("own", "pipelined", "prompt"):
        broker = RedisStreamBroker(
            redis_url,
            queue_name=f"{key_prefix}:{way}",
            maxlen=maxlen,
            approximate=approximate,
        )
        labelled = f"{key_prefix}:{way}:labelled"
        kicks = {
            "own": broker,
            "pipelined": kicking_broker(broker),
            "prompt": prompt_broker(kicking_broker(broker)),
        }
        kick = kicks[way].kick
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
    assert written["prompt"] == written["own"]
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


@pytest.mark.parametrize("way", ["pipelined", "prompt"])
async def test_a_prompt_kick_is_written_a_loop_turn_after_its_callers_step(
    redis_url: str, key_prefix: str, way: str
) -> None:
    """A continuation's kick does not wait its turn behind every ready task.

    The task started after it lets one turn pass (redis-py writes from a task of
    its own on Python 3.11), then blocks the loop while it polls Redis with a
    blocking client: a kick that waits for further turns is not found.
    """
    broker = RedisStreamBroker(redis_url, queue_name=f"{key_prefix}:{way}")
    kicks = kicking_broker(broker)
    kick = prompt_broker(kicks).kick if way == "prompt" else kicks.kick
    blocking = SyncRedis.from_url(redis_url)

    async def look() -> bool:
        await asyncio.sleep(0)
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:  # the loop stays blocked meanwhile
            if blocking.xlen(broker.queue_name) == 2:
                return True
        return False

    try:
        await kick(_message("warm"))  # the connection is open
        kicked = asyncio.ensure_future(kick(_message("a")))
        found = await asyncio.ensure_future(look())
        await kicked
    finally:
        blocking.close()
        await broker.shutdown()
    assert found is (way == "prompt")


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
    redis_url: str, redis_client: Redis, key_prefix: str
) -> None:
    size = 120
    log = SendLog(redis_client, f"{key_prefix}:stream")
    broker, fanin = stream_broker(redis_url, key_prefix, log)

    @broker.task
    async def member(index: int) -> None:
        return None

    await broker.startup()
    kicks = fanin.context.kicker
    assert isinstance(kicks, PipelinedBroker)
    try:
        handle = await group([Signature.of(member, i) for i in range(size)]).kiq(broker)
    finally:
        await broker.shutdown()
    ids = {f"{handle.group_id}~{index}" for index in range(size)}
    assert set(log.before) == ids
    assert set(log.after_and_found) == ids  # post_send came after Redis had it
    assert await redis_client.xlen(f"{key_prefix}:stream") == size
    # Kicks in flight together went together: far fewer pipelines than members.
    assert kicks.pipeline.stats.commands == size
    assert kicks.pipeline.stats.pipelines <= size // 10


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
        kicker = fanin.context.kicker
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


async def test_a_prompt_kick_redis_refuses_raises_to_its_caller(
    redis_url: str, redis_client: Redis, key_prefix: str
) -> None:
    """Sent at once (``PipelineBatcher.now``), a continuation's kick that Redis
    refuses is the finaliser's error, as a batched one is: never dropped."""
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
        prompt = fanin.context.prompt_kicker
        assert isinstance(prompt, PipelinedBroker)
        refused = Signature.of(job).with_labels(queue_name=not_a_stream)
        with pytest.raises(SendTaskError):
            await refused.kicker(prompt).kiq()
        await Signature.of(job).kicker(prompt).kiq()
    finally:
        await broker.shutdown()
    assert await redis_client.xlen(broker.queue_name) == 1


class StreamLength(TaskiqMiddleware):
    """Notes, as each message is about to be sent, how many the stream holds."""

    def __init__(self, client: Redis, stream: str) -> None:
        super().__init__()
        self.client = client
        self.stream = stream
        self.seen: list[int] = []

    async def pre_send(self, message: TaskiqMessage) -> TaskiqMessage:
        self.seen.append(await self.client.xlen(self.stream))
        return message


async def test_a_groups_first_member_is_in_the_stream_before_the_others_are_built(
    redis_url: str, redis_client: Redis, key_prefix: str
) -> None:
    # Building a message costs the planner ~0.1-0.2 ms: the first member starts
    # without waiting for the rest of the group's messages to be built.
    lengths = StreamLength(redis_client, f"{key_prefix}:stream")
    broker, _ = stream_broker(redis_url, key_prefix, lengths)

    @broker.task
    async def member(index: int) -> None:
        return None

    await broker.startup()
    try:
        await group([Signature.of(member, i) for i in range(10)]).kiq(broker)
    finally:
        await broker.shutdown()
    assert lengths.seen[0] == 0
    assert min(lengths.seen[1:]) == 1
