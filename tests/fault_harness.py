"""The rig of the fault-injection and load tests: two redis-servers of the test's
own, real ``taskiq worker`` processes of ``tests.fault_app``, and what a test
waits on and counts.

- The *main* server carries the stream and the library's keys; the faults hit
  it (restart, suspend, pause). The *observation* server is where the workers
  say what they ran; no fault touches it, so no count is lost with the fault.
- A test knows it has waited long enough for a duplicate to show when the
  stream is drained: every message ever added was delivered and acknowledged,
  and no continuation or chain step runs in a live worker (``drained``), so
  nothing is still to run anywhere.
- taskiq-redis's stream broker takes back a message left unacknowledged by a
  dead worker only when a read returns something, after ``IDLE_TIMEOUT_MS``.
  ``nudging`` stands in for a live system's steady traffic: while some message
  has waited that long, it kicks a no-op.
"""

import asyncio
import contextlib
import importlib
import json
import re
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import Popen
from types import ModuleType
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import RedisError
from taskiq import TaskiqError

from local_redis import (
    CONSUMER_GROUP,
    RedisServer,
    alive,
    children_of,
    eventually,
    poll_until,
    stream_drained,
)
from taskiq_fanin import ChainHandle, FanInMiddleware, Signature, group, sweep
from taskiq_fanin.api.broker import find_fanin
from taskiq_fanin.inspection import group_status
from taskiq_fanin.sweeping import FindingKind, SweepReport
from tests.harness import worker_process

__all__ = [
    "AOF",
    "APP",
    "CONSUMER_GROUP",
    "POOL_EXHAUSTED",
    "RECOVERY",
    "RETRY_LOG",
    "SHORT_LEASE",
    "Nudges",
    "Rig",
    "alive",
    "children_of",
    "completed_and_drained",
    "continuations",
    "fault_rig",
    "killed_by_kill_switch",
    "nudging",
    "plan",
    "state_of",
    "summary",
    "sweep_until",
    "the_child",
]

APP = "tests.fault_app:broker"
#: A Redis that keeps every write it acknowledged across a crash.
AOF = ("--appendonly", "yes", "--appendfsync", "always")
#: What a worker logs when a hook meets Redis away and retries (transport/retrying.py).
RETRY_LOG = "Redis is away"
#: What a client whose pool ran dry raises or logs.
POOL_EXHAUSTED = re.compile(r"MaxConnectionsError|Too many connections")
#: Long enough for a worker restarted by ``taskiq worker`` and a 2 s idle timeout.
RECOVERY = 60.0
#: The run lease of a continuation or step in the tests whose first delivery
#: dies: a copy delivered again while it holds stays unacknowledged, and runs
#: once it has run out (its worker renews it every third of it while alive).
SHORT_LEASE = {"FINALISER_LEASE": "3"}


@dataclass
class Rig:
    """The servers, the app as the test process loads it, and clients of both."""

    main: RedisServer
    observer: RedisServer
    prefix: str
    app: ModuleType
    #: On the main server, replies as bytes.
    redis: Redis
    #: On the observation server, replies as text.
    obs: Redis
    env: dict[str, str]
    logs: Path
    workers: list[Path] = field(default_factory=list)

    @property
    def fanin(self) -> FanInMiddleware:
        """The test process's middleware: status, sweep."""
        return find_fanin(self.app.broker)

    @contextlib.contextmanager
    def worker(
        self, name: str, *, max_async_tasks: int = 10, **env: str
    ) -> Iterator[Popen[bytes]]:
        """A ``taskiq worker`` of the app, logging to ``<logs>/<name>.log``."""
        log = self.logs / f"{name}.log"
        self.workers.append(log)
        with worker_process(
            APP, {**self.env, **env}, max_async_tasks=max_async_tasks, log=log
        ) as process:
            yield process

    # -- what the workers reported on the observation server --------------------

    def key(self, name: str) -> str:
        """An observation key (``fault_app.obs_key``)."""
        return str(self.app.obs_key(name))

    async def delivered(self, task_name: str) -> int:
        """Deliveries of ``task_name`` that reached a worker."""
        return int(await self.obs.hget(self.key("delivered"), task_name) or 0)

    async def delivered_id(self, task_id: str) -> int:
        """Deliveries of the message with this task id."""
        return int(await self.obs.hget(self.key("delivered_ids"), task_id) or 0)

    async def listed(self, name: str) -> list[str]:
        """An observation list, in order."""
        return [str(item) for item in await self.obs.lrange(self.key(name), 0, -1)]

    async def counted(self, name: str) -> dict[str, int]:
        """An observation hash of counts."""
        found = await self.obs.hgetall(self.key(name))
        return {str(key): int(value) for key, value in found.items()}

    async def flag(self, name: str) -> str | None:
        """An observation string (``hung``, ``killed``), if it was set."""
        found = await self.obs.get(self.key(name))
        return None if found is None else str(found)

    async def flagged(self, name: str) -> bool:
        """Whether the observation string ``name`` was set (a condition to wait on)."""
        return await self.flag(name) is not None

    async def count(self, name: str) -> int:
        """Length of an observation list."""
        return int(await self.obs.llen(self.key(name)))

    # -- the stream -----------------------------------------------------------

    async def drained(self) -> bool:
        """Every message added to the stream was delivered and acknowledged, and
        no continuation or chain step body runs in a live worker.

        XACK acknowledges a message, not one delivery of it: a copy the broker
        delivered again may still run after the first one was acknowledged.
        """
        if not await stream_drained(self.redis, self.app.STREAM):
            return False
        bodies = await self.counted("running")
        return not any(count and alive(int(pid)) for pid, count in bodies.items())

    async def failed_and_drained(self, handle: ChainHandle) -> bool:
        """The chain failed, and nothing more will run (a condition to wait on)."""
        return (await handle.status()).state.value == "failed" and await self.drained()

    async def added(self) -> int:
        """Messages ever added to the stream (it is never trimmed here)."""
        return int(await self.redis.xlen(self.app.STREAM))

    async def keys_without_ttl(self) -> set[str]:
        """Keys under the prefix that never expire."""
        found: set[str] = set()
        async for key in self.redis.scan_iter(match=f"{self.prefix}:*", count=1000):
            if await self.redis.pttl(key) == -1:
                found.add(key.decode())
        return found

    def worker_logs(self) -> str:
        """Everything the workers of this test printed."""
        return "".join(log.read_text(errors="replace") for log in self.workers)


@contextlib.asynccontextmanager
async def fault_rig(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    redis_args: Sequence[str] = (),
    **env: str,
) -> AsyncIterator[Rig]:
    """Start both servers, load ``tests.fault_app`` for them, and clean up."""
    with (
        RedisServer(extra_args=redis_args) as main,
        RedisServer() as observer,
    ):
        prefix = f"t-{uuid.uuid4().hex[:12]}"
        env = {
            "REDIS_URL": main.url,
            "OBS_URL": observer.url,
            "APP_PREFIX": prefix,
            **env,
        }
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        app = importlib.reload(importlib.import_module("tests.fault_app"))
        redis = Redis.from_url(main.url)
        obs = Redis.from_url(observer.url, decode_responses=True)
        # The consumer group is made here, before anything is kicked.
        await app.broker.startup()
        try:
            yield Rig(main, observer, prefix, app, redis, obs, env, tmp_path)
        finally:
            await app.broker.shutdown()
            await redis.aclose()
            await obs.aclose()
            await app.obs().aclose()


#: How long the end of ``nudging`` waits for its loop to stop.
STOP_SECONDS = 5.0


@dataclass
class Nudges:
    """How many no-ops were kicked, and how many kicks met Redis away."""

    sent: int = 0
    failed: int = 0


@contextlib.asynccontextmanager
async def nudging(rig: Rig, *, every: float = 0.2) -> AsyncIterator[Nudges]:
    """While a message waits unacknowledged past the idle timeout, kick a no-op.

    A live system's traffic does the same; without it taskiq-redis never reads
    again, and never takes back what a dead worker held.
    """
    nudges = Nudges()
    stop = asyncio.Event()

    async def loop() -> None:
        while not stop.is_set():
            try:
                idle = await rig.redis.xpending_range(
                    rig.app.STREAM,
                    CONSUMER_GROUP,
                    min="-",
                    max="+",
                    count=1,
                    idle=rig.app.IDLE_TIMEOUT_MS,
                )
                if idle:
                    await rig.app.nudge.kiq()
                    nudges.sent += 1
            except (RedisError, TaskiqError, OSError):
                nudges.failed += 1  # Redis is away: the fault under test
            await asyncio.sleep(every)

    task = asyncio.create_task(loop())
    try:
        yield nudges
    finally:
        # The flag stops a loop whose call swallowed the cancel (redis-py's send
        # under Python 3.11's wait_for, tests/test_nudging.py); wait(), not
        # awaiting the task, so that our own caller's cancel is not taken for
        # the loop's; bounded, so that a wedged loop fails the test, not hangs it.
        stop.set()
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=STOP_SECONDS)
        if not done:
            msg = f"the nudging loop did not stop within {STOP_SECONDS} s"
            raise AssertionError(msg)
        if not task.cancelled():
            task.result()  # raises the loop's own error, if it met one


def the_child(process: Popen[bytes], *, timeout: float = 30.0) -> int:
    """The pid of the one child (the worker proper) of a ``taskiq worker``."""
    children: list[int] = []

    def one_child() -> bool:
        children[:] = children_of(process.pid)
        return len(children) == 1

    if not poll_until(one_child, timeout=timeout):
        msg = f"taskiq worker {process.pid} has no single child process"
        raise AssertionError(msg)
    return children[0]


def summary(test: str, **counts: Any) -> None:
    """One line of counts, visible with ``pytest -s``, to be quoted."""
    print(f"\n[faults] {test}: " + ", ".join(f"{k}={v}" for k, v in counts.items()))


# -- what a test plans, waits for and reads -----------------------------------


async def plan(rig: Rig, group_id: str, members: int) -> None:
    app = rig.app
    await group(
        [Signature.of(app.member, group_id, index) for index in range(members)],
        then=app.publish,
        group_id=group_id,
    ).kiq(app.broker)


async def continuations(rig: Rig) -> list[dict[str, Any]]:
    return [json.loads(item) for item in await rig.listed("continuations")]


async def state_of(rig: Rig, group_id: str) -> str:
    return (await group_status(rig.fanin, group_id)).state.value


async def completed_and_drained(rig: Rig, group_id: str) -> bool:
    """The continuation ran to its end (the group shrank to its tombstone) and
    every message was delivered and acknowledged; not yet while Redis is away."""
    try:
        return await rig.drained() and await state_of(rig, group_id) == "completed"
    except RedisError:
        return False


async def sweep_until(rig: Rig, kind: FindingKind) -> tuple[SweepReport, int]:
    """Sweep until one finds (and acts on) a finding of ``kind``; also how many
    sweeps that took."""
    reports: list[SweepReport] = []

    async def found() -> bool:
        reports.append(await sweep(rig.app.broker))
        return any(f.kind is kind for f in reports[-1].findings)

    await eventually(found, timeout=RECOVERY, what=f"a sweep to find {kind.value}")
    return reports[-1], len(reports)


async def killed_by_kill_switch(rig: Rig) -> tuple[int, str]:
    """The pid that the app's kill switch killed, and the message it was sending."""
    pid, task_id = (await rig.flag("killed") or "0 -").split()
    return int(pid), task_id
