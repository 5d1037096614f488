"""One run: its own keys and queue, a ready worker, and a clean Redis afterwards."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from taskiq import AsyncBroker

from benchmarks._report import (
    Check,
    Steps,
    console,
    describe_run,
    print_checks,
    progress_bars,
    run_date,
    write_json,
)
from benchmarks._workers import (
    PING_ENTRIES,
    WorkerProcess,
    install_cleanup,
    interrupted,
)
from benchmarks.apps.common import AppSettings
from local_redis import (
    CONSUMER_GROUP,
    RedisProvider,
    delete_keys,
    group_cpu_seconds,
    provide_redis,
    stream_drained,
    wait_until,
)

#: Where worker logs go, under the results directory.
LOG_DIR = "logs"


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
    worker: WorkerProcess
    entries: int = PING_ENTRIES

    async def drained(self) -> bool:
        """Every expected entry was delivered and acknowledged."""
        return await stream_drained(self.client, self.settings.queue, self.entries)

    async def wait_drained(self, timeout: float) -> bool:
        """Wait (with a deadline) until :meth:`drained`."""
        return await wait_until(
            self.drained, timeout=timeout, check=self.worker.check_alive
        )

    def worker_cpu(self) -> float | None:
        """CPU seconds used so far by the worker's processes (Linux only)."""
        return group_cpu_seconds(self.worker.pgid)


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
    worker = WorkerProcess(
        app,
        settings,
        max_async_tasks=max_async_tasks,
        log_path=results_dir / LOG_DIR / f"{label}.log",
    )
    try:
        await broker.startup()
        worker.start()
        await worker.wait_ready(broker, client)
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


def run_alone(
    name: str,
    run: Callable[[RedisProvider, Any, Steps], Coroutine[Any, Any, dict[str, Any]]],
    checks: Callable[[dict[str, Any]], list[Check]],
    options: Any,
    *,
    redis_choice: str,
    json_path: Path,
    legend: str,
) -> int:
    """``python -m benchmarks.<name>``: one benchmark, its table and its JSON."""
    install_cleanup()
    date = run_date()
    try:
        with provide_redis(redis_choice) as provider:
            console.print(provider.description)
            with progress_bars() as bars:
                data = asyncio.run(
                    run(provider, options, Steps(bars, name, options.steps))
                )
    except KeyboardInterrupt:
        return interrupted()
    write_json(json_path, data)
    redis = f"{provider.kind} {provider.version}".strip()
    notes = [f"{date}, {redis}. {describe_run({name: data}, kind='Run')}", legend]
    print_checks(checks(data), title=name, notes=notes)
    console.print(f"JSON: {json_path}")
    return 0
