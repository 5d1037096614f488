"""What a newcomer meets first, on a real redis-server and a real Receiver: empty
groups that complete, a @group_task kick's handle, time options as timedelta,
arguments that travel as JSON by a documented rule."""

from datetime import datetime, timedelta, timezone

from redis.asyncio import Redis

from taskiq_fanin import (
    ChainHandle,
    FanInMiddleware,
    GroupResult,
    Signature,
    chain,
    group,
    group_handle,
    group_task,
    sweep,
)
from taskiq_fanin.models import ChainState
from taskiq_fanin.storage.keys import GroupKeys
from tests.harness import (
    SentMessages,
    drained,
    eventually,
    lossy_stream_broker,
    stream_broker,
    worker,
)


async def test_an_empty_group_task_body_runs_its_continuation_at_once(
    redis_url: str, key_prefix: str
) -> None:
    sent = SentMessages()
    broker, _ = stream_broker(redis_url, key_prefix, sent)
    published: list[tuple[int, GroupResult]] = []

    @broker.task
    async def resize(album: int, image: int) -> None:
        return None

    @broker.task
    async def publish(result: GroupResult, album: int) -> None:
        published.append((album, result))

    @broker.task
    @group_task()
    async def make_album(album: int) -> object:
        images: list[int] = []  # an album with no images
        members = [Signature.of(resize, album, i) for i in images]
        return group(members, then=Signature.of(publish, album))

    async with worker(broker, max_async_tasks=2) as receiver:
        kicked = await make_album.kiq(7)
        handle = group_handle(broker, kicked)
        await eventually(lambda: len(published) == 1, what="the continuation")
        await eventually(
            lambda: sent.executions_of(publish.task_name) == 1, what="its end"
        )
        status = await handle.status()
        await drained(broker, receiver)

    ((album, result),) = published
    assert album == 7
    assert (result.total, result.results, result.failed, result.ok) == (0, [], {}, True)
    assert handle.group_id == kicked.task_id
    assert (status.state.value, status.total) == ("completed", 0)


async def test_an_empty_group_step_carries_its_chain_on(
    redis_url: str, key_prefix: str
) -> None:
    broker, _ = stream_broker(redis_url, key_prefix)
    ended: list[GroupResult] = []

    @broker.task
    async def find() -> list[int]:
        return []

    @broker.task
    async def use(result: GroupResult) -> None:
        ended.append(result)

    async with worker(broker, max_async_tasks=1):
        handle = await chain(Signature.of(find), group([]), Signature.of(use)).kiq(
            broker
        )
        await eventually(lambda: len(ended) == 1, what="the step after the group")
        await eventually(
            lambda: _chain_is(handle, ChainState.DONE), what="the chain to end"
        )

    assert ended[0].total == 0


async def test_time_options_take_a_timedelta_as_well_as_seconds(
    redis_url: str, redis_client: Redis, key_prefix: str
) -> None:
    broker, _ = stream_broker(
        redis_url,
        key_prefix,
        ttl=timedelta(hours=2),
        deadline=timedelta(minutes=30),
        finaliser_lease=timedelta(seconds=45),
    )

    @broker.task
    async def member() -> None:
        return None

    await broker.startup()
    try:
        await group(
            [Signature.of(member)],
            group_id="td",
            ttl=timedelta(minutes=20),
            deadline=timedelta(minutes=5),
        ).kiq(broker)
        await group([Signature.of(member)], group_id="defaults").kiq(broker)
        metas = [GroupKeys(key_prefix, g).meta for g in ("td", "defaults")]
        spans = [await redis_client.hmget(meta, ["ttl", "span"]) for meta in metas]
    finally:
        await broker.shutdown()
    assert spans == [[b"1200000", b"300000"], [b"7200000", b"1800000"]]


async def test_annotated_arguments_arrive_as_their_types_even_when_redriven(
    redis_url: str, key_prefix: str
) -> None:
    """Arguments travel as JSON, as taskiq sends them: a task annotated with the
    type gets it back (a datetime, a set), from the first dispatch and from the
    ledger when the sweep re-drives a lost member."""
    broker, fanin = lossy_stream_broker(redis_url, key_prefix, deadline=0.2)
    seen: list[tuple[datetime, set[str]]] = []

    @broker.task
    async def stamp(when: datetime, tags: set[str]) -> None:
        seen.append((when, tags))

    when = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
    tags = {"b", "a"}
    async with worker(broker, max_async_tasks=2) as receiver:
        broker.drop.add("json~1")  # the second member is lost on its way
        await group(
            [Signature.of(stamp, when, tags), Signature.of(stamp, when, tags)],
            group_id="json",
            sweep_policy="redrive",
        ).kiq(broker)
        await eventually(lambda: len(seen) == 1, what="the first member")
        await eventually(
            lambda: _redriven(fanin, "json"), what="the sweep to re-drive the other"
        )
        await eventually(lambda: len(seen) == 2, what="the re-driven member")
        await drained(broker, receiver)

    assert seen == [(when, tags), (when, tags)]
    assert all(isinstance(w, datetime) and isinstance(t, set) for w, t in seen)


async def _redriven(fanin: FanInMiddleware, group_id: str) -> bool:
    report = await sweep(fanin)
    return any(f.group_id == group_id and f.applied for f in report.findings)


async def _chain_is(handle: ChainHandle, state: ChainState) -> bool:
    return (await handle.status()).state is state
