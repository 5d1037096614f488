"""Settings shared by a benchmark and its workers, and the broker built from them."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import asdict, dataclass
from typing import Any

from redis.asyncio import Redis
from taskiq import (
    AsyncBroker,
    AsyncTaskiqDecoratedTask,
    BrokerMessage,
    TaskiqEvents,
    TaskiqMiddleware,
)
from taskiq_redis import RedisAsyncResultBackend, RedisStreamBroker

from taskiq_fanin import FanInMiddleware

#: The environment variable a worker process reads its settings from (JSON).
SETTINGS_ENV = "TASKIQ_FANIN_BENCH"

#: The task a benchmark kicks to know a worker is listening.
PING_TASK = "bench.ping"

#: Results of the waiting parents' children outlive any run, then expire.
RESULT_TTL_SECONDS = 600


@dataclass(frozen=True)
class AppSettings:
    """Where one run's broker, fan-in and records live.

    ``keys`` prefixes every key the run writes besides the stream (records,
    results, fan-in keys), so a run cleans up after itself without flushing.
    """

    redis_url: str
    queue: str
    keys: str
    #: Where the FanInMiddleware keeps its keys; '' runs without the middleware.
    fanin_url: str = ""
    #: RedisAsyncResultBackend, which only the waiting parents need.
    results: bool = False
    #: How long a waiting parent waits for each child (seconds).
    wait_timeout: float = 5.0
    #: The FanInMiddleware's ``durability`` (``replicated``: WAIT for a replica).
    durability: str = "acknowledged"
    #: The FanInMiddleware's ``waiting_guard`` (a body awaiting another's result).
    waiting_guard: str = "raise"

    @property
    def fanin_prefix(self) -> str:
        """The FanInMiddleware's key prefix (starts with ``keys``)."""
        return f"{self.keys}-fanin"

    def record(self, name: str) -> str:
        """A key for the benchmark's own bookkeeping."""
        return f"{self.keys}:rec:{name}"

    def to_env(self) -> dict[str, str]:
        """The environment entry a worker process reads."""
        return {SETTINGS_ENV: json.dumps(asdict(self))}

    @classmethod
    def from_env(cls) -> AppSettings:
        """Settings of the worker process this is imported in."""
        raw = os.environ.get(SETTINGS_ENV)
        if not raw:
            msg = f"{SETTINGS_ENV} is not set: start workers through benchmarks"
            raise RuntimeError(msg)
        return cls(**json.loads(raw))


class BurstBroker(RedisStreamBroker):
    """The benchmark's client broker: it can hold kicks and send them as one burst.

    Inside ``async with broker.burst():`` kicks are kept, and on leaving they are
    added to the stream in one MULTI/EXEC, so a worker sees the whole burst at
    once, however fast it reacts to the first message.
    """

    def __init__(self, url: str, **kwargs: Any) -> None:
        super().__init__(url, **kwargs)
        self._held: list[BrokerMessage] | None = None

    @contextlib.asynccontextmanager
    async def burst(self) -> AsyncIterator[None]:
        """Hold the kicks made in the block; send them together at its end."""
        self._held = []
        try:
            yield
        finally:
            held, self._held = self._held, None
        async with Redis(connection_pool=self.connection_pool) as conn:
            pipe = conn.pipeline(transaction=True)
            for message in held:
                queue = message.labels.get("queue_name") or self.queue_name
                pipe.xadd(queue, {b"data": message.message})
            await pipe.execute()

    async def kick(self, message: BrokerMessage) -> None:
        """Send ``message``, or hold it inside :meth:`burst`."""
        if self._held is not None:
            self._held.append(message)
        else:
            await super().kick(message)


def make_broker(
    settings: AppSettings, *middlewares: TaskiqMiddleware, burst: bool = False
) -> AsyncBroker:
    """A stream broker on the run's own queue, with fan-in when configured.

    ``burst`` makes it a :class:`BurstBroker` (only ever the benchmark's client).
    """
    stream = BurstBroker if burst else RedisStreamBroker
    broker: AsyncBroker = stream(settings.redis_url, queue_name=settings.queue)
    if settings.results:
        broker = broker.with_result_backend(
            RedisAsyncResultBackend(
                settings.redis_url,
                result_ex_time=RESULT_TTL_SECONDS,
                prefix_str=f"{settings.keys}:result",
            )
        )
    chain = list(middlewares)
    if settings.fanin_url:
        chain.append(
            FanInMiddleware(
                settings.fanin_url,
                prefix=settings.fanin_prefix,
                durability=settings.durability,
                waiting_guard=settings.waiting_guard,
            )
        )
    if chain:
        broker = broker.with_middlewares(*chain)

    @broker.task(task_name=PING_TASK)
    async def ping() -> None:
        """Does nothing: its delivery and acknowledgement are the signal."""

    return broker


class App:
    """One run's broker, its recorder and its tasks, each by its short name.

    ``@app.task("bench.deadlock.resize")`` registers a task on the broker and
    makes it ``app.resize``. The recorder (the worker's own connection for the
    benchmark's bookkeeping) opens on first use, in the worker's event loop, and
    closes when the worker shuts down.
    """

    def __init__(
        self, settings: AppSettings, *middlewares: TaskiqMiddleware, burst: bool = False
    ) -> None:
        self.settings = settings
        self.broker = make_broker(settings, *middlewares, burst=burst)
        self.tasks: dict[str, AsyncTaskiqDecoratedTask[Any, Any]] = {}
        self._client: Redis | None = None
        self.broker.add_event_handler(TaskiqEvents.WORKER_SHUTDOWN, self._close)

    def task(self, name: str) -> Callable[[Callable[..., Any]], Any]:
        """Register the decorated function as the task ``name``."""

        def register(body: Callable[..., Any]) -> Any:
            task = self.broker.task(task_name=name)(body)
            self.tasks[name.rsplit(".", 1)[-1]] = task
            return task

        return register

    def __getattr__(self, name: str) -> AsyncTaskiqDecoratedTask[Any, Any]:
        try:
            return self.__dict__["tasks"][name]  # type: ignore[no-any-return]
        except KeyError:
            raise AttributeError(name) from None

    @property
    def client(self) -> Redis:
        """The recorder's Redis client, opened on first use."""
        if self._client is None:
            self._client = Redis.from_url(self.settings.redis_url)
        return self._client

    async def _close(self, _state: Any) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def stamp(self, name: str, field: str | int) -> None:
        """Note when ``field`` finished (epoch seconds) in the hash ``name``."""
        await self.client.hset(self.settings.record(name), str(field), time.time())
