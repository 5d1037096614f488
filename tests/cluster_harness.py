"""The app of ``tests.cluster_app`` on a real Redis Cluster, as a test drives it:
the test's own broker of the app (a lossy one), real ``taskiq worker``
processes of it (``test_cluster_workflows.py`` says why not receivers), and
what the workers counted and published.
"""

import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

from taskiq import AsyncBroker

from taskiq_fanin import FanInMiddleware, GroupStatus
from taskiq_fanin.api.broker import find_fanin
from taskiq_fanin.inspection import group_status
from tests import cluster_app
from tests.harness import eventually, worker_process

APP = "tests.cluster_app:broker"


@dataclass
class ClusterApp:
    """The test's own broker of the app (a lossy one) and what it counts."""

    broker: AsyncBroker
    url: str
    prefix: str
    kind: str
    durability: str = "acknowledged"

    @property
    def fanin(self) -> FanInMiddleware:
        return find_fanin(self.broker)

    @property
    def redis(self) -> Any:
        return self.fanin.context.redis

    @property
    def env(self) -> dict[str, str]:
        return {
            "REDIS_CLUSTER_URL": self.url,
            "APP_PREFIX": self.prefix,
            "BROKER_KIND": self.kind,
            "APP_DURABILITY": self.durability,
        }

    def task(self, name: str) -> Any:
        return self.broker.find_task(f"cluster_app.{name}")

    def drop(self, task_id: str) -> None:
        self.broker.drop.add(task_id)  # type: ignore[attr-defined]

    @contextlib.contextmanager
    def worker(self, max_async_tasks: int = 10) -> Iterator[None]:
        with worker_process(APP, self.env, max_async_tasks=max_async_tasks):
            yield

    async def counts(self) -> dict[str, int]:
        raw = await self.redis.hgetall(cluster_app.counts_key(self.prefix))
        return {key.decode(): int(value) for key, value in raw.items()}

    async def runs(self) -> dict[str, int]:
        """Starts of the members' bodies, by task id."""
        return {
            key.removeprefix("run:"): value
            for key, value in (await self.counts()).items()
            if key.startswith("run:")
        }

    async def published(self) -> list[dict[str, Any]]:
        raw = await self.redis.lrange(cluster_app.published_key(self.prefix), 0, -1)
        return [json.loads(item) for item in raw]

    async def drained(self, *, lost: int = 0) -> None:
        """Every kick but the ``lost`` ones has been finished with by a worker."""

        counts: dict[str, int] = {}

        async def nothing_left() -> bool:
            counts.update(await self.counts())
            return counts.get("sent", 0) - lost == counts.get("finished", 0)

        try:
            await eventually(nothing_left, timeout=20, what="everything to finish")
        except AssertionError as exc:
            raise AssertionError(f"{exc} (lost {lost}, counts {counts})") from None

    async def status(self, group_id: str) -> GroupStatus:
        return await group_status(self.fanin, group_id)

    def cli(self, *args: str) -> tuple[str, ...]:
        """The command line's options to read this app's Redis from a node's URL."""
        return ("--redis-url", self.url, "--cluster", "--prefix", self.prefix, *args)


@contextlib.asynccontextmanager
async def app_on(
    url: str, prefix: str, kind: str, *, durability: str = "acknowledged"
) -> AsyncIterator[ClusterApp]:
    broker = cluster_app.build(url, prefix, kind, lossy=True, durability=durability)
    await broker.startup()  # a stream's consumer group exists before any kick
    # Its own kicks go one by one, several at once: set up its RedisCluster
    # first (the stream broker's startup closes it), as the fresh one fails some
    # callers otherwise (test_a_fresh_middleware_on_a_cluster_...).
    await broker.redis.initialize()  # type: ignore[attr-defined]
    try:
        yield ClusterApp(broker, url, prefix, kind, durability)
    finally:
        await broker.shutdown()


async def published_at_least(app: ClusterApp, count: int) -> bool:
    return len(await app.published()) >= count
