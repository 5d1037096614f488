"""One run: its own keys and queue, a ready worker, and a clean Redis afterwards.

The worker process itself (its own process group, SIGTERM then SIGKILL, nothing
left behind) is the toolkit's ``local_redis.TaskiqWorker``; a run adds its
settings, passed through the environment, and a ping that proves it listens.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from redis.asyncio import Redis
from taskiq import AsyncBroker
from taskiq.kicker import AsyncKicker

from benchmarks.apps.common import PING_TASK, AppSettings
from local_redis import (
    CONSUMER_GROUP,
    TaskiqWorker,
    WorkerError,
    delete_keys,
    stream_drained,
    wait_until,
    with_pythonpath,
)

#: The repository root: workers import ``benchmarks.apps.*`` from here.
ROOT = Path(__file__).resolve().parents[1]
#: Where worker logs go, under the results directory.
LOG_DIR = "logs"
#: Seconds a worker may take to start listening (imports, fork, broker startup).
READY_TIMEOUT = 60.0
#: Seconds between SIGTERM and SIGKILL. taskiq 0.13 often keeps polling its
#: stream after SIGTERM instead of exiting, so this is usually spent in full.
STOP_GRACE = 1.0
#: Seconds a stopping worker waits for running tasks (it never needs them).
WAIT_TASKS_TIMEOUT = 1.0
#: Stream entries a run starts with: the ping that proved the worker ready.
PING_ENTRIES = 1
#: ``taskiq worker`` options of every run; a log line per task would be worker
#: CPU spent on both sides alike.
WORKER_OPTIONS = (
    "--log-level", "WARNING",
    "--shutdown-timeout", "1",
    "--wait-tasks-timeout", str(WAIT_TASKS_TIMEOUT),
)  # fmt: skip


def new_settings(redis_url: str, bench: str, **options: object) -> AppSettings:
    """Settings with a fresh key prefix and queue, so runs never see each other."""
    keys = f"bench-{bench}-{uuid.uuid4().hex[:10]}"
    return AppSettings(
        redis_url=redis_url,
        queue=f"{keys}:queue",
        keys=keys,
        **options,  # type: ignore[arg-type]
    )


@dataclass
class Run:
    """A worker listening on the run's queue, and a client for probes.

    ``entries`` is how many stream entries the run expects so far; a benchmark
    adds what it kicks (and the continuations it expects) before waiting.
    """

    settings: AppSettings
    broker: AsyncBroker
    client: Redis
    worker: TaskiqWorker
    entries: int = PING_ENTRIES

    async def record(self, name: str, *, clear: bool = False) -> dict[str, float]:
        """One of the run's bookkeeping hashes (``settings.record``), as numbers.

        ``clear`` deletes it once read, for the next group to write afresh.
        """
        key = self.settings.record(name)
        raw = await self.client.hgetall(key)
        if clear:
            await self.client.delete(key)
        return {
            (k.decode() if isinstance(k, bytes) else k): float(v)
            for k, v in raw.items()
        }

    async def drained(self) -> bool:
        """Every expected entry was delivered and acknowledged."""
        return await stream_drained(self.client, self.settings.queue, self.entries)

    async def wait_drained(self, timeout: float) -> bool:
        """Wait (with a deadline) until :meth:`drained`."""
        return await wait_until(
            self.drained, timeout=timeout, check=self.worker.check_alive
        )

    async def drain(self, timeout: float, what: str) -> None:
        """:meth:`wait_drained`, or ``TimeoutError`` naming ``what`` did not drain."""
        if not await self.wait_drained(timeout):
            msg = f"{what}: not drained in {timeout:g}s"
            raise TimeoutError(msg)


async def wait_ready(
    worker: TaskiqWorker, broker: AsyncBroker, client: Redis, queue: str
) -> None:
    """Kick a ping on the run's queue and wait until it was acknowledged.

    A blocked XREADGROUP does not show in XINFO CONSUMERS (Redis 7.0), so a
    round trip is the proof that the worker is listening. The stream then holds
    that one entry: see :data:`PING_ENTRIES`.
    """
    kicker: AsyncKicker[[], None] = AsyncKicker(
        task_name=PING_TASK, broker=broker, labels={}
    )
    await kicker.kiq()
    ready = await wait_until(
        lambda: stream_drained(client, queue, PING_ENTRIES),
        timeout=READY_TIMEOUT,
        check=worker.check_alive,
    )
    if not ready:
        tail = worker.log_tail()
        worker.stop()
        msg = f"worker {worker.app} not ready in {READY_TIMEOUT:g}s:\n{tail}"
        raise WorkerError(msg)


@contextlib.asynccontextmanager
async def worker_run(
    app: str,
    broker: AsyncBroker,
    settings: AppSettings,
    *,
    max_async_tasks: int,
    results_dir: Path,
    label: str,
) -> AsyncIterator[Run]:
    """Start a worker for ``app`` on the run's queue; clean everything up after.

    ``broker`` is the benchmark's own (client) broker for the same settings.
    """
    client = Redis.from_url(settings.redis_url)
    worker = TaskiqWorker(
        f"{app}:worker_broker",
        max_async_tasks=max_async_tasks,
        options=WORKER_OPTIONS,
        cwd=ROOT,
        env=with_pythonpath(ROOT, {**os.environ, **settings.to_env()}),
        log_path=results_dir / LOG_DIR / f"{label}.log",
        grace=STOP_GRACE,
    )
    try:
        await broker.startup()
        worker.start()
        await wait_ready(worker, broker, client, settings.queue)
        yield Run(settings=settings, broker=broker, client=client, worker=worker)
    finally:
        worker.stop()
        try:
            await broker.shutdown()
            lock = f"autoclaim:{CONSUMER_GROUP}:{settings.queue}"
            await delete_keys(settings.redis_url, settings.keys, lock)
            if settings.fanin_url and settings.fanin_url != settings.redis_url:
                await delete_keys(settings.fanin_url, settings.keys)
        finally:
            await client.aclose()
