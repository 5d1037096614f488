"""Groups, chains, cancelling and the sweep end to end on a real 3-master Redis
Cluster, with taskiq-redis's cluster brokers and real ``taskiq worker``
processes of ``tests.cluster_app`` (a ``FanInMiddleware`` given a node's URL
with ``cluster=True``); and the CLI against a cluster node's URL.

Workers are processes, not receivers in the test's loop: cancelling a
``RedisStreamClusterBroker``'s read mid-way can hang (``test_redelivery.py``).
Before a test counts, everything kicked has been finished with
(``ClusterApp.drained``).
"""

import asyncio
from typing import Any

import pytest
from fakeredis.aioredis import FakeRedis
from redis.asyncio import RedisCluster
from taskiq import AsyncBroker, BrokerMessage
from taskiq_redis import ListQueueClusterBroker, RedisStreamClusterBroker

from local_redis import free_port
from taskiq_fanin import (
    FanInMiddleware,
    Signature,
    cancel,
    chain,
    group,
    group_handle,
    sweep,
)
from taskiq_fanin.domain.ids import member_task_id
from taskiq_fanin.errors import InvalidOptionError
from taskiq_fanin.inspection import chain_status, group_status, progress
from taskiq_fanin.storage.keys import index_key, sweep_lock_key
from taskiq_fanin.transport.queue_kicks import PipelinedBroker, kicking_broker
from tests import cluster_app
from tests.cli_runner import run_cli
from tests.cluster_harness import APP, ClusterApp, app_on, published_at_least
from tests.harness import eventually
from tests.window_probe import InFlightProbe

pytestmark = pytest.mark.cluster

KINDS = ["stream", "list"]
#: Seconds: a group's deadline, short enough for the sweep to act within a test.
DEADLINE = 1.0


@pytest.mark.parametrize("kind", KINDS)
async def test_the_album_fans_in_once_on_a_cluster(
    redis_cluster_url: str, key_prefix: str, kind: str
) -> None:
    async with app_on(redis_cluster_url, key_prefix, kind) as app:
        with app.worker():
            members = [Signature.of(app.task("member"), i) for i in range(5)]
            await group(members, then=app.task("publish"), group_id="album").kiq(
                app.broker
            )
            await eventually(
                lambda: published_at_least(app, 1), what="the continuation"
            )
            await app.drained()
        published, runs = await app.published(), await app.runs()
        status = await app.status("album")
        # Its stream and pace are read on the group's slot, in one pipeline.
        read = await progress(app.fanin, "album")
        outcomes = [o.index async for o in group_handle(app.fanin, "album").outcomes()]

    assert [result["results"] for result in published] == [[0, 10, 20, 30, 40]]
    assert runs == {member_task_id("album", i): 1 for i in range(5)}
    assert (status.state.value, status.done) == ("completed", 5)
    assert (read.done, read.total, read.ended, read.rate is not None) == (
        5, 5, True, True
    )  # fmt: skip
    assert sorted(outcomes) == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("kind", KINDS)
async def test_a_chain_with_a_group_step_runs_through_on_a_cluster(
    redis_cluster_url: str, key_prefix: str, kind: str
) -> None:
    async with app_on(redis_cluster_url, key_prefix, kind) as app:
        with app.worker():
            step = group([Signature.of(app.task("scaled"), i) for i in range(3)])
            await chain(
                Signature.of(app.task("first"), 1),
                step,
                Signature.of(app.task("publish")),
                chain_id="video",
            ).kiq(app.broker)
            await eventually(lambda: published_at_least(app, 1), what="the last step")
            await app.drained()
        published = await app.published()
        status = await chain_status(app.fanin, "video")

    # first(1) == 2, then each member scaled(2, i), then publish(GroupResult).
    assert [result["results"] for result in published] == [[200, 201, 202]]
    assert status.state.value == "done"


@pytest.mark.parametrize("kind", KINDS)
async def test_a_windowed_group_keeps_its_window_on_a_cluster(
    redis_cluster_url: str, key_prefix: str, kind: str
) -> None:
    size, window = 10, 3
    async with app_on(redis_cluster_url, key_prefix, kind) as app:
        with app.worker(max_async_tasks=10):
            members = [
                # The first window's members wait for each other to run.
                Signature.of(app.task("windowed"), "windowed", i, window)
                for i in range(size)
            ]
            await group(
                members,
                then=app.task("publish"),
                group_id="windowed",
                max_in_flight=window,
            ).kiq(app.broker)
            await eventually(
                lambda: published_at_least(app, 1), what="the continuation"
            )
            await app.drained()
        published, status = await app.published(), await app.status("windowed")
        probe = InFlightProbe(app.redis, key_prefix, "windowed")
        most, ran = await probe.most(), await probe.members_ran()

    assert [result["results"] for result in published] == [
        [i * 10 for i in range(size)]
    ]
    assert (most, ran) == (window, set(range(size)))
    assert (status.state.value, status.done, status.in_flight) == (
        "completed",
        size,
        0,
    )


async def test_a_cancelled_group_runs_no_continuation_on_a_cluster(
    redis_cluster_url: str, key_prefix: str
) -> None:
    async with app_on(redis_cluster_url, key_prefix, "stream") as app:
        # Two slots: two members start and hold; the other two wait their turn.
        with app.worker(max_async_tasks=2):
            members = [Signature.of(app.task("member"), i, True) for i in range(4)]
            await group(
                members, then=app.task("publish"), group_id="doomed", cancellable=True
            ).kiq(app.broker)

            async def two_holding() -> bool:
                return (await app.counts()).get("holding", 0) == 2

            await eventually(two_holding, what="two members to start")
            assert await cancel(app.broker, "doomed")
            await app.redis.set(cluster_app.release_key(key_prefix), 1)
            await app.drained()
        status, runs = await app.status("doomed"), await app.runs()
        published = await app.published()

    assert published == []
    assert sorted(runs.values()) == [1, 1]  # the two that ran, once each
    assert (status.state.value, status.done, status.pending) == ("cancelled", 2, 2)


async def _lose_a_member(app: ClusterApp, group_id: str) -> None:
    """Plan a group of four whose member 2's kick is lost; wait past its deadline."""
    app.drop(member_task_id(group_id, 2))
    members = [Signature.of(app.task("member"), i) for i in range(4)]
    await group(
        members, then=app.task("publish"), group_id=group_id, deadline=DEADLINE
    ).kiq(app.broker)
    await app.drained(lost=1)

    async def overdue() -> bool:
        return (await app.status(group_id)).overdue()

    await eventually(overdue, what="the group's deadline")


async def _redriven_once(app: ClusterApp, group_id: str) -> None:
    await eventually(lambda: published_at_least(app, 1), what="the continuation")
    await app.drained(lost=1)
    assert [r["results"] for r in await app.published()] == [[0, 10, 20, 30]]
    assert await app.runs() == {member_task_id(group_id, i): 1 for i in range(4)}
    assert (await app.status(group_id)).state.value == "completed"


@pytest.mark.parametrize("kind", KINDS)
async def test_a_lost_member_is_redriven_by_the_sweep_on_a_cluster(
    redis_cluster_url: str, key_prefix: str, kind: str
) -> None:
    async with app_on(redis_cluster_url, key_prefix, kind) as app:
        with app.worker():
            await _lose_a_member(app, "lost")
            assert (await app.status("lost")).done == 3
            report = await sweep(app.fanin, sweep_policy="redrive")
            await _redriven_once(app, "lost")
        lock_left = await app.redis.exists(sweep_lock_key(key_prefix))

    (finding,) = report.findings
    assert (finding.group_id, finding.missing, finding.applied) == ("lost", [2], True)
    assert lock_left == 0  # released on its node


@pytest.mark.parametrize("kind", KINDS)
async def test_the_cli_finds_and_redrives_a_lost_member_on_a_cluster(
    redis_cluster_url: str, key_prefix: str, kind: str
) -> None:
    async with app_on(redis_cluster_url, key_prefix, kind) as app:
        with app.worker():
            await _lose_a_member(app, "lost")
            # From a node's URL: status, the stuck list, and a dry run.
            status = await run_cli(*app.cli("--json", "status", "lost"))
            stuck = await run_cli(*app.cli("--json", "list", "--stuck"))
            dry = await run_cli(*app.cli("--json", "sweep", "--fail-on-stuck"))
            # Acting kicks tasks: through the app's broker, as for `taskiq worker`.
            redrive = await run_cli(
                "--json", "--broker", APP, "sweep", "--redrive", env=app.env
            )
            await _redriven_once(app, "lost")

    assert (status.code, status.json()["done"], status.json()["total"]) == (0, 3, 4)
    assert stuck.code == 0, stuck.stderr
    assert [document["group_id"] for document in stuck.json()] == ["lost"]
    assert dry.code == 3, dry.stderr  # stuck, and said so for cron
    assert [f["missing"] for f in dry.json()["findings"]] == [[2]]
    assert redrive.code == 0, redrive.stderr
    (finding,) = redrive.json()["findings"]
    assert (finding["missing"], finding["applied"]) == ([2], True)


async def test_the_cli_on_a_cluster_node_without_cluster_says_to_pass_it(
    redis_cluster_url: str, key_prefix: str
) -> None:
    # A key prefix whose index lives on another node than the one named: MOVED.
    cluster = RedisCluster.from_url(redis_cluster_url)
    try:
        await cluster.initialize()
        named = cluster.get_node_from_key(index_key(key_prefix)).port
        others = [n for n in cluster.get_primaries() if n.port != named]
        url = f"redis://{others[0].host}:{others[0].port}"
    finally:
        await cluster.aclose()

    plain = await run_cli("--redis-url", url, "--prefix", key_prefix, "list")
    clustered = await run_cli(
        "--redis-url", url, "--cluster", "--prefix", key_prefix, "list"
    )

    assert plain.code == 4
    assert "MOVED" in plain.stderr
    assert "pass --cluster" in plain.stderr
    assert clustered.code == 0, clustered.stderr
    assert "No open groups or chains" in clustered.stdout


@pytest.mark.parametrize(
    "broker_type", [RedisStreamClusterBroker, ListQueueClusterBroker]
)
async def test_kicks_on_a_cluster_broker_share_pipelines(
    redis_cluster_url: str, key_prefix: str, broker_type: type[AsyncBroker]
) -> None:
    size = 60
    queue = f"{key_prefix}:queue"
    broker = broker_type(redis_cluster_url, queue_name=queue)  # type: ignore[call-arg]
    fanin = FanInMiddleware(redis_cluster_url, cluster=True, prefix=key_prefix)
    broker.with_middlewares(fanin)

    @broker.task
    async def member(index: int) -> None:
        return None

    await broker.startup()
    try:
        kicks = fanin.context.kicker
        assert isinstance(kicks, PipelinedBroker)
        await group([Signature.of(member, i) for i in range(size)]).kiq(broker)
        # What the broker's own kick writes, beside what a pipelined kick writes.
        own, piped = f"{key_prefix}:own", f"{key_prefix}:piped"
        message = BrokerMessage(task_id="x", task_name="t", message=b"m", labels={})
        await broker.kick(message.model_copy(update={"labels": {"queue_name": own}}))
        await kicking_broker(broker).kick(
            message.model_copy(update={"labels": {"queue_name": piped}})
        )
        redis: Any = fanin.context.redis
        if broker_type is RedisStreamClusterBroker:
            queued = await redis.xlen(queue)
            written = [
                [fields for _, fields in await redis.xrange(key)]
                for key in (own, piped)
            ]
        else:
            queued = await redis.llen(queue)
            written = [await redis.lrange(key, 0, -1) for key in (own, piped)]
        slots = {redis.keyslot(key) for key in (queue, own, piped)}
    finally:
        await broker.shutdown()

    assert queued == size
    assert kicks.pipeline.stats.commands == size
    assert kicks.pipeline.stats.pipelines <= size // 10  # together, not one by one
    assert written[0]
    assert written[0] == written[1]  # as the broker's own kick
    assert len(slots) == 3  # a labelled queue elsewhere still gets its message


async def test_cluster_applies_to_a_url_only() -> None:
    client = FakeRedis()
    try:
        with pytest.raises(InvalidOptionError, match="cluster"):
            FanInMiddleware(client, cluster=True)
    finally:
        await client.aclose()


async def test_a_fresh_middleware_on_a_cluster_answers_concurrent_calls(
    redis_cluster_url: str, key_prefix: str
) -> None:
    """redis-py's RedisCluster, used by several callers at once before its first
    command has set it up, fails some of them with an AttributeError (seen about
    once in ten bursts of ten); the middleware sets its client up at startup."""
    failures: list[BaseException] = []
    for trial in range(20):
        fanin = FanInMiddleware(redis_cluster_url, cluster=True, prefix=key_prefix)
        await fanin.startup()
        try:
            ids = [f"g{trial}-{i}" for i in range(10)]
            replies = await asyncio.gather(
                *(group_status(fanin, g) for g in ids), return_exceptions=True
            )
        finally:
            await fanin.shutdown()
        failures.extend(r for r in replies if isinstance(r, BaseException))
    assert failures == []


async def test_the_cli_on_an_unreachable_cluster_exits_unreachable() -> None:
    url = f"redis://127.0.0.1:{free_port()}"
    done = await run_cli("--redis-url", url, "--cluster", "list")
    assert done.code == 4, done.stderr
    assert done.stderr.startswith("taskiq-fanin: Redis: ")
