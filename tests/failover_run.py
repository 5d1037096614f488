"""What the two failover tests under load share (issue 19: Sentinel, test a,
``tests/test_sentinel_failover.py``; Cluster, test b,
``tests/test_cluster_failover_workers.py``): the run's shape, the app loaded in
the test process, its workers, the counts, the repair, and the promise checked.

Each test keeps its servers, its broker's app, and how its primary dies: a
``Run`` subclass says how to reach the primary (``connect``) and what Redis
raises while it switches (``errors``). Counts come from an observation server
no fault touches, taken once nothing is left to run (``Run.drained``).
"""

import asyncio
import dataclasses
import importlib
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import pytest
from redis.asyncio import Redis
from redis.exceptions import RedisError
from taskiq import TaskiqError

from local_redis import CONSUMER_GROUP, eventually
from taskiq_fanin import Signature, chain, group, sweep
from taskiq_fanin.api.broker import find_fanin
from taskiq_fanin.inspection import group_status
from taskiq_fanin.models import GroupState
from taskiq_fanin.storage.keys import GroupKeys
from taskiq_fanin.sweeping import SweepAction, SweepReport
from tests.fault_harness import summary
from tests.harness import worker_process

GROUPS, MEMBERS, CHAINS, STEPS = 20, 100, 20, 3
#: Members delivered before the primary is killed: the run is well under way.
KILL_AFTER = 600
#: The run lease (finaliser_lease): longer than the failover takes, else a body
#: running through it cannot renew its lease and a copy may run beside it (not
#: promised: docs/guarantees.md).
RUN_LEASE = 10
#: How long the repair (workers restarted, sweeps re-driving) may take.
RECOVERY = 40.0
#: A pending entry idle this long is held by a read that died with the
#: primary: a live worker acknowledges a member or step within a second.
DEAD_HOLD_MS = 3000
#: How long a member, a chain step takes (``tests.failover_tasks``).
PACE = {"MEMBER_SECONDS": "0.05", "STEP_SECONDS": "0.3"}
#: taskiq's ``--shutdown-timeout`` for the workers (seconds): the apps' retry_for.
SHUTDOWN_TIMEOUT = 30.0


@dataclasses.dataclass
class Run:
    """The setup, the app as the test process loads it, its clients, and the
    steps of a run."""

    app: ModuleType
    obs: Redis
    prefix: str
    env: dict[str, str]
    logs: Path

    #: What Redis raises while the primary switches.
    errors: ClassVar[tuple[type[Exception], ...]] = (RedisError,)

    def connect(self) -> AbstractAsyncContextManager[Any]:
        """A client of the primary (of the Cluster), for the test's reads."""
        raise NotImplementedError

    def key(self, name: str) -> str:
        return str(self.app.obs_key(name))

    async def counted(self, name: str) -> dict[str, int]:
        found = await self.obs.hgetall(self.key(name))
        return {str(k): int(v) for k, v in found.items()}

    async def delivered(self, task_name: str) -> int:
        return int(await self.obs.hget(self.key("delivered"), task_name) or 0)

    @contextmanager
    def worker(self, name: str) -> Iterator[None]:
        app = f"{self.app.__name__}:broker"
        # A worker whose read of the queue meets the killed primary is shut
        # down by taskiq with bodies still running: time for the middleware to
        # record what ended once Redis is back (its retry_for), as a user
        # riding out a failover would give it.
        with worker_process(
            app,
            self.env,
            max_async_tasks=20,
            log=self.logs / f"{name}.log",
            shutdown_timeout=SHUTDOWN_TIMEOUT,
        ):
            yield

    async def start(self) -> None:
        """Kick every group and chain, then wait until the run is well under way."""
        app = self.app
        groups = [
            group(
                [Signature.of(app.member, f"g{g}", i) for i in range(MEMBERS)],
                then=app.publish,
                group_id=f"g{g}",
            ).kiq(app.broker)
            for g in range(GROUPS)
        ]
        chains = [
            chain(
                Signature.of(app.step, 0, f"c{c}", 0),
                *(Signature.of(app.step, f"c{c}", n) for n in range(1, STEPS)),
                chain_id=f"c{c}",
            ).kiq(app.broker)
            for c in range(CHAINS)
        ]
        await asyncio.gather(*groups, *chains)

        async def under_way() -> bool:
            return await self.delivered(app.member.task_name) >= KILL_AFTER

        await eventually(under_way, what="the members to be under way")

    async def recorded(self) -> set[str]:
        """Member task ids whose outcome a worker recorded (said the observer)."""
        return {str(m) for m in await self.obs.smembers(self.key("recorded"))}

    async def finished(self) -> bool:
        ran = await self.counted("continuations")
        return len(ran) == GROUPS and all(last_steps(await self.counted("steps")))

    async def drained(self) -> bool:
        """Nothing is left to run: every stream entry delivered, and every one
        still pending held by a read that died with the primary (idle for long)."""
        stream = self.app.STREAM
        try:
            async with self.connect() as client:
                groups = await client.xinfo_groups(stream)
                (found,) = [g for g in groups if g["name"] == CONSUMER_GROUP.encode()]
                if found["lag"]:
                    return False
                fresh = await client.xpending_range(
                    stream, CONSUMER_GROUP, min="-", max="+", count=1
                )
                live = [e for e in fresh if e["time_since_delivered"] < DEAD_HOLD_MS]
                return not live
        except (*self.errors, RuntimeError):  # type: ignore[misc]
            return False

    async def drain(self) -> None:
        """Wait until nothing is left to run."""
        await eventually(self.drained, timeout=RECOVERY, what="the stream to drain")

    async def kept(self) -> set[str]:
        """Member task ids whose outcome the primary holds now: those in an open
        group's done set, and every member of a group past open (its outcomes
        were all recorded; a finished group keeps no done set).

        The done set is read before the state: a group still open after it
        held every member recorded before it (the set only grows while open),
        where one read open and then dispatched (its done set unlinked) before
        its set was read would count every member lost.
        """
        fanin = find_fanin(self.app.broker)
        found: set[str] = set()
        async with self.connect() as client:
            for g in range(GROUPS):
                done = await client.smembers(GroupKeys(self.prefix, f"g{g}").done)
                status = await group_status(fanin, f"g{g}")
                if status.state is not GroupState.OPEN:
                    found |= {f"g{g}~{i}" for i in range(MEMBERS)}
                    continue
                found |= {f"g{g}~{int(i)}" for i in done}
        return found

    async def sweeps(self) -> list[SweepReport]:
        """Sweep (re-driving) until every continuation and last step has run."""
        reports: list[SweepReport] = []

        async def swept() -> bool:
            try:
                reports.append(await sweep(self.app.broker, sweep_policy="redrive"))
            except (*self.errors, TaskiqError, OSError):  # type: ignore[misc]
                return False  # the primary is still switching
            return await self.finished()

        await eventually(swept, timeout=RECOVERY, interval=1.0, what="the repair")
        return reports

    async def seen(self) -> "Seen":
        """The observer's counts (read while the workers still run)."""
        return Seen(
            continuations=await self.counted("continuations"),
            steps=await self.counted("steps"),
            deliveries=await self.counted("delivered_ids"),
            delivered=await self.delivered(self.app.member.task_name),
            succeeded=await self.counted("succeeded"),
        )

    def read_logs(self) -> str:
        """The workers' logs, once they stopped."""
        return "".join(p.read_text(errors="replace") for p in self.logs.glob("*.log"))


@asynccontextmanager
async def loaded(
    module: str, monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> AsyncIterator[tuple[ModuleType, Redis]]:
    """The app ``module`` loaded for ``env`` (``OBS_URL`` its observer), and a
    client of the observer; closed after."""
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    app = importlib.reload(importlib.import_module(module))
    obs = Redis.from_url(env["OBS_URL"], decode_responses=True)
    await app.broker.startup()  # the consumer group, before any kick
    try:
        yield app, obs
    finally:
        await app.broker.shutdown()
        await obs.aclose()
        await app.obs().aclose()


def last_steps(steps: dict[str, int]) -> list[int]:
    """How many times each chain's last step ran."""
    return [steps.get(f"c{c}~{STEPS - 1}", 0) for c in range(CHAINS)]


@dataclasses.dataclass
class Seen:
    """What the observer counted, once the stream drained, and the workers' logs."""

    continuations: dict[str, int]
    steps: dict[str, int]
    deliveries: dict[str, int]
    delivered: int
    succeeded: dict[str, int]
    logs: str = ""


def print_summary(
    title: str,
    counts: Seen,
    reports: list[SweepReport],
    lost: set[str],
    *,
    started: float,
    killed: float,
    failover: float,
    held: int | None = None,
    failovers: int | None = None,
    rejoined: float | None = None,
) -> None:
    """One line of counts (``tests.fault_harness.summary``); ``held``,
    ``failovers`` and ``rejoined`` are one test's own."""
    members = {k: v for k, v in counts.deliveries.items() if k.startswith("g")}
    line: dict[str, Any] = {
        "members_delivered": counts.delivered,
        "redelivered": sum(n - 1 for n in members.values() if n > 1),
        "redriven_by_sweep": sum(
            f.missing_count
            for report in reports
            for f in report.findings
            if f.action is SweepAction.REDRIVE and f.applied
        ),
        "outcomes_lost": len(lost),
    }
    if held is not None:
        line["entries_held_dead"] = held
    line["continuations_run"] = sum(counts.continuations.values())
    line["last_steps_run"] = sum(last_steps(counts.steps))
    line["sweeps"] = len(reports)
    if failovers is not None:
        line["failovers"] = failovers
    line["hooks_retried"] = counts.logs.count("Redis is away")
    line["killed_at_s"] = round(killed, 1)
    line["failover_s"] = round(failover, 1)
    if rejoined is not None:
        line["rejoined_s"] = round(rejoined, 1)
    line["seconds"] = round(time.monotonic() - started, 1)
    summary(title, **line)


def check(durability: str, counts: Seen, lost: set[str]) -> None:
    """The promise: under ``replicated`` nothing recorded is lost and every body
    runs once; without it every group and chain ends (a guard's write may vanish
    in the switch, guarantees.md: not promised; a double is reported). Under
    both, every continuation saw all its members: what the switch lost was
    re-driven from the ledger and recorded."""
    last = last_steps(counts.steps)
    if durability == "replicated":
        assert lost == set()
        assert counts.continuations == {f"g{g}": 1 for g in range(GROUPS)}
        assert last == [1] * CHAINS
    else:
        assert set(counts.continuations) == {f"g{g}" for g in range(GROUPS)}
        assert all(last), last
    assert counts.succeeded == {f"g{g}": MEMBERS for g in range(GROUPS)}
