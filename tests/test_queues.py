"""Steps and members on other queues, on a real redis-server and two real
Receivers: a task registered on a second broker (its own stream, the
middleware on it too, the same prefix) is kicked on that broker, whichever
broker plans the group or chain, and each worker consumes only its own queue.
"""

import importlib
from pathlib import Path

import pytest
from redis.asyncio import Redis
from taskiq_redis import RedisStreamBroker

from local_redis import RedisServer, children_of
from taskiq_fanin import FanInMiddleware, GroupResult, Signature, chain, group
from taskiq_fanin.errors import UnknownTaskError
from taskiq_fanin.groups.workers_seen import SEEN_FOR
from taskiq_fanin.models import ChainState
from taskiq_fanin.storage.keys import GroupKeys, index_key, workers_key
from tests.harness import (
    BLOCK_MS,
    SentMessages,
    chain_reached,
    drained,
    eventually,
    worker,
    worker_process,
)

HEAVY = 3


def broker_on(
    redis_url: str, key_prefix: str, queue: str
) -> tuple[RedisStreamBroker, SentMessages]:
    """A stream broker on its own queue, the middleware on it; what it ran."""
    broker = RedisStreamBroker(
        redis_url, queue_name=f"{key_prefix}:{queue}", xread_block=BLOCK_MS
    )
    ran = SentMessages()
    broker.add_middlewares(ran, FanInMiddleware(redis_url, prefix=key_prefix))
    return broker, ran


def names(ran: SentMessages) -> list[str]:
    """The tasks a worker ran, by name, sorted."""
    return sorted(message.task_name for message in ran.executed)


async def test_a_chain_runs_its_light_and_heavy_steps_each_on_its_own_queue(
    redis_url: str, key_prefix: str
) -> None:
    """probe (light) -> a group of heavy encodes -> publish (light), planned on
    the light broker; the heavy worker records the group and kicks publish."""
    light, light_ran = broker_on(redis_url, key_prefix, "light")
    heavy, heavy_ran = broker_on(redis_url, key_prefix, "heavy")
    ran: list[tuple[str, str]] = []

    @light.task
    async def probe(video: str) -> int:
        ran.append(("light", f"probe {video}"))
        return 10

    @heavy.task
    async def encode(size: int, rendition: int) -> int:
        ran.append(("heavy", f"encode {rendition}"))
        return size * rendition

    @light.task
    async def publish(result: GroupResult) -> None:
        ran.append(("light", f"publish {result.results}"))

    async with (
        worker(light, max_async_tasks=2) as light_receiver,
        worker(heavy, max_async_tasks=2) as heavy_receiver,
    ):
        handle = await chain(
            Signature.of(probe, "cat"),
            group([Signature.of(encode, r) for r in range(HEAVY)]),
            Signature.of(publish),
        ).kiq(light)
        await eventually(
            lambda: chain_reached(light, handle.chain_id, ChainState.DONE),
            what="the chain to end",
        )
        await drained(light, light_receiver)
        await drained(heavy, heavy_receiver)

    # Each worker ran only what its queue carried (the bodies say where they ran
    # by the broker they are registered on, and each worker reads one stream).
    assert sorted(ran) == sorted(
        [
            ("light", "probe cat"),
            *[("heavy", f"encode {r}") for r in range(HEAVY)],
            ("light", "publish [0, 10, 20]"),
        ]
    )
    # The heavy worker also ran the library's own hop after the group (its
    # continuation, registered on every broker with the middleware).
    user_tasks = {probe.task_name, encode.task_name, publish.task_name}
    assert [n for n in names(heavy_ran) if n in user_tasks] == [encode.task_name] * 3
    assert [n for n in names(light_ran) if n in user_tasks] == sorted(
        [probe.task_name, publish.task_name]
    )


async def test_a_group_planned_on_one_broker_kicks_each_member_on_its_own(
    redis_url: str, key_prefix: str
) -> None:
    light, light_ran = broker_on(redis_url, key_prefix, "light")
    heavy, heavy_ran = broker_on(redis_url, key_prefix, "heavy")
    results: list[GroupResult] = []

    @heavy.task
    async def encode(rendition: int) -> int:
        return rendition

    @light.task
    async def thumbnail(rendition: int) -> int:
        return -rendition

    @heavy.task
    async def collect(result: GroupResult) -> None:
        results.append(result)

    async with (
        worker(light, max_async_tasks=2) as light_receiver,
        worker(heavy, max_async_tasks=2) as heavy_receiver,
    ):
        members = [Signature.of(encode, 1), Signature.of(thumbnail, 2)]
        await group(members, then=collect).kiq(light)
        await eventually(lambda: len(results) == 1, what="the continuation")
        await drained(light, light_receiver)
        await drained(heavy, heavy_receiver)

    assert results[0].results == [1, -2]
    assert names(light_ran) == [thumbnail.task_name]
    assert names(heavy_ran) == sorted([encode.task_name, collect.task_name])


async def test_a_chain_across_two_queues_runs_with_a_worker_process_per_queue(
    redis_url: str, key_prefix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each ``taskiq worker`` process starts only its own broker: the heavy
    one's claimant kicks the light last step through the light broker all the
    same (the middleware on both, the same prefix)."""
    with RedisServer() as observer:
        env = {
            "REDIS_URL": redis_url,
            "OBS_URL": observer.url,
            "APP_PREFIX": key_prefix,
        }
        for name, value in env.items():  # the app, imported here too, reads them
            monkeypatch.setenv(name, value)
        app = importlib.reload(importlib.import_module("tests.queues_app"))
        obs = Redis.from_url(observer.url, decode_responses=True)
        # Each stream's consumer group is made here, before anything is kicked:
        # a worker that starts after the first kick onto its stream reads from
        # then on (taskiq-redis makes the group at '$'), and would never see it.
        await app.light.startup()
        await app.heavy.startup()
        try:
            with (
                worker_process(
                    "tests.queues_app:light", env, log=tmp_path / "l.log"
                ) as light_process,
                worker_process(
                    "tests.queues_app:heavy", env, log=tmp_path / "h.log"
                ) as heavy_process,
            ):
                handle = await chain(
                    Signature.of(app.probe, "cat"),
                    group([Signature.of(app.encode, r) for r in range(HEAVY)]),
                    Signature.of(app.publish),
                ).kiq(app.light)
                await eventually(
                    lambda: chain_reached(app.light, handle.chain_id, ChainState.DONE),
                    timeout=30,
                    what="the chain to end",
                )
                ran = await obs.lrange(f"{key_prefix}:ran", 0, -1)
                # Each worker process says which queue it serves, with an expiry.
                async with Redis.from_url(redis_url) as main:
                    announced = [
                        await main.pttl(workers_key(key_prefix, q))
                        for q in (f"{key_prefix}:light", f"{key_prefix}:heavy")
                    ]
                pids = {
                    "light": set(children_of(light_process.pid)),
                    "heavy": set(children_of(heavy_process.pid)),
                }
        finally:
            await app.light.shutdown()
            await app.heavy.shutdown()
            await obs.aclose()

    where = {name: int(pid) for pid, name in (line.split(" ", 1) for line in ran)}
    by_process = {
        name: next(kind for kind, found in pids.items() if pid in found)
        for name, pid in where.items()
    }
    assert sorted(line.split(" ", 1)[1] for line in ran) == sorted(
        ["probe", *["encode"] * HEAVY, "publish [0, 3, 6]"]
    )
    assert all(0 < ttl <= SEEN_FOR * 1000 for ttl in announced), announced
    assert by_process == {
        "probe": "light",
        "encode": "heavy",
        "publish [0, 3, 6]": "light",
    }


async def test_brokers_keeping_their_fan_in_in_two_redis_are_no_peers(
    redis_url: str, key_prefix: str
) -> None:
    """The same prefix in another Redis (another database here): a member kicked
    there would record its outcome where its group is not, so the plan is
    refused as naming a task no broker of its fan-in knows, nothing written."""
    light = RedisStreamBroker(redis_url, queue_name=f"{key_prefix}:light")
    light.add_middlewares(FanInMiddleware(redis_url, prefix=key_prefix))
    other_db = redis_url.rsplit("/", 1)[0] + "/1"
    heavy = RedisStreamBroker(other_db, queue_name=f"{key_prefix}:heavy")
    heavy.add_middlewares(FanInMiddleware(other_db, prefix=key_prefix))

    @heavy.task
    async def encode(rendition: int) -> int:
        return rendition

    await light.startup()
    try:
        with pytest.raises(UnknownTaskError, match="No broker knows"):
            await group([Signature.of(encode, 1)], group_id="far").kiq(light)
        async with Redis.from_url(redis_url) as client:
            assert not await client.exists(GroupKeys(key_prefix, "far").meta)
            assert not await client.exists(index_key(key_prefix))
    finally:
        await light.shutdown()
