"""A Redis Cluster failover under load (issue 19, test b): the primary holding
most of the groups' slots SIGKILLed mid-run, its replica promoted, and every
group's continuation and every chain's last step run.

Three primaries with a replica each (``cluster-node-timeout`` 1 s), of the
test's own; taskiq-redis's ``RedisStreamClusterBroker`` as the broker and real
``taskiq worker`` processes of ``tests.cluster_failover_app``; the library on
the same Cluster. The stream's name is picked so that it lives on the primary
killed too: the workers' reads die with it (``taskiq worker`` starts its
process again, until the replica is promoted) and the switch may lose stream
entries, the hardest case. Clients are given another primary's address (a
process started again starts from it).

What the switch loses: replication is asynchronous, so the promoted replica
lacks the last writes the old primary acknowledged. On loopback it lags too
little to show it, so it is made to lag as a busy replica does: frozen, its
link dropped, until the primary holds a few kilobytes of writes it lacks
(recorded outcomes, stream entries), and then the primary is killed. What the
workers' dead reads and failed acknowledgements held stays pending for good
(taskiq-redis's cluster stream broker never reclaims). The sweep, re-driving
from the ledger past the groups' deadline, repairs both; it cannot tell a
member lost from one only late (queued behind the ones whose writes were
refused until the node rejoined), and re-drives both: a member runs at least
once. Counts come from an observation server no fault touches, taken once
nothing is left to run (``_drained``).

After the promotion the killed node is restarted, as an operator would: it
keeps its ports and its ``nodes.conf`` and rejoins as a replica of the node
promoted in its place. With one replica per primary that is what lets
``durability="replicated"`` write to those slots again (a promoted primary
with no replica refuses every replicated write, docs/guarantees.md): one
replica each is the topology the issue names and the cheapest a Cluster runs,
and a restart is the ordinary repair, where a second replica per primary would
make nine nodes on a two-CPU machine. Under ``replicated`` no recorded outcome
may be lost and every body runs once; under the default the outcomes lost are
counted, and a double is reported, not failed (a guard's write may vanish in
the switch: not promised).
"""

import asyncio
import dataclasses
import importlib
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import redis
from redis.asyncio import Redis
from redis.crc import key_slot
from redis.exceptions import RedisClusterException, RedisError
from taskiq import TaskiqError

from local_redis import CONSUMER_GROUP, RedisCluster, RedisServer, eventually
from taskiq_fanin import Signature, chain, group, sweep
from taskiq_fanin.api.broker import find_fanin
from taskiq_fanin.inspection import group_status
from taskiq_fanin.models import GroupState
from taskiq_fanin.store.keys import GroupKeys
from taskiq_fanin.sweeping import SweepAction, SweepReport
from tests.fault_harness import summary
from tests.harness import worker_process
from tests.test_cluster_failover import promoted, replica_of, replication_info

pytestmark = [pytest.mark.faults, pytest.mark.cluster]

APP = "tests.cluster_failover_app:broker"
GROUPS, MEMBERS, CHAINS, STEPS = 20, 100, 20, 3
#: Members delivered before the primary is killed: the run is well under way.
KILL_AFTER = 600
#: Bytes of writes the primary takes while its replica is behind, before it
#: is killed (an outcome recorded is a few hundred).
BEHIND_BYTES = 5_000
#: The run lease (finaliser_lease): longer than the failover takes.
RUN_LEASE = 10
#: A group's deadline (s), past which the sweep re-drives its members without
#: an outcome: about when the run would end by itself, so that the repair
#: comes soon and re-drives few members that were only late.
DEADLINE = 8
#: How long the repair (workers restarted, sweeps re-driving) may take.
RECOVERY = 40.0
#: A pending entry idle this long is held by a read that died with the
#: primary: a live worker acknowledges a member or step within a second.
DEAD_HOLD_MS = 3000


@dataclasses.dataclass
class Run:
    """The setup, the app as the test process loads it, and its clients."""

    cluster: RedisCluster
    #: The primary to kill: the one holding most of the groups' slots.
    target: RedisServer
    app: ModuleType
    obs: Redis
    prefix: str
    env: dict[str, str]
    logs: Path

    def key(self, name: str) -> str:
        return str(self.app.obs_key(name))

    @property
    def redis(self) -> Any:
        """The test process's cluster client (the library's)."""
        return find_fanin(self.app.broker).context.redis

    async def counted(self, name: str) -> dict[str, int]:
        found = await self.obs.hgetall(self.key(name))
        return {str(k): int(v) for k, v in found.items()}

    async def delivered(self, task_name: str) -> int:
        return int(await self.obs.hget(self.key("delivered"), task_name) or 0)

    @contextmanager
    def worker(self, name: str) -> Iterator[None]:
        with worker_process(
            APP, self.env, max_async_tasks=20, log=self.logs / f"{name}.log"
        ):
            yield


def _primaries(cluster: RedisCluster) -> dict[int, RedisServer]:
    """Each primary, by the slots it serves: slot -> node."""
    nodes = {node.port: node for node in cluster.nodes}
    with redis.Redis(port=cluster.nodes[0].port) as client:
        slots: Any = client.execute_command("CLUSTER", "SLOTS")
    found = {}
    for start, end, primary, *_ in slots:
        node = nodes[int(primary[1])]
        found |= dict.fromkeys(range(int(start), int(end) + 1), node)
    return found


def _layout(cluster: RedisCluster, prefix: str) -> tuple[RedisServer, str, str]:
    """The primary holding most groups' slots, a stream on it, another's URL."""
    by_slot = _primaries(cluster)
    held = Counter(by_slot[key_slot(f"g{g}".encode())].port for g in range(GROUPS))
    port = held.most_common(1)[0][0]
    target = next(node for node in cluster.nodes if node.port == port)
    stream = next(
        name
        for name in (f"{prefix}:stream:{n}" for n in range(10_000))
        if by_slot[key_slot(name.encode())] is target
    )
    other = next(node for node in set(by_slot.values()) if node is not target)
    return target, stream, other.url


@asynccontextmanager
async def cluster_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **env: str
) -> AsyncIterator[Run]:
    with (
        RedisCluster(replicas=1, node_timeout_ms=1000) as cluster,
        RedisServer() as observer,
    ):
        prefix = f"t-{uuid.uuid4().hex[:12]}"
        target, stream, url = _layout(cluster, prefix)
        env = {
            "REDIS_CLUSTER_URL": url,
            "QUEUE": stream,
            "OBS_URL": observer.url,
            "APP_PREFIX": prefix,
            **env,
        }
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        app = importlib.reload(importlib.import_module("tests.cluster_failover_app"))
        obs = Redis.from_url(observer.url, decode_responses=True)
        await app.broker.startup()  # the consumer group, before any kick
        # Its kicks go several at once: set up its client first (its startup
        # closes it; a fresh one fails some callers, test_cluster_workflows.py).
        await app.broker.redis.initialize()
        try:
            yield Run(cluster, target, app, obs, prefix, env, tmp_path)
        finally:
            await app.broker.shutdown()
            await obs.aclose()
            await app.obs().aclose()


async def _start(run: Run) -> None:
    app = run.app
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


async def _finished(run: Run) -> bool:
    ran = await run.counted("continuations")
    steps = await run.counted("steps")
    last = [steps.get(f"c{c}~{STEPS - 1}", 0) for c in range(CHAINS)]
    return len(ran) == GROUPS and all(last)


async def _drained(run: Run) -> bool:
    """Nothing is left to run: every stream entry delivered, and every one still
    pending held by a read that died with the primary (idle for long)."""
    stream = run.app.STREAM
    try:
        groups = await run.redis.xinfo_groups(stream)
        (found,) = [g for g in groups if g["name"] == CONSUMER_GROUP.encode()]
        if found["lag"]:
            return False
        fresh = await run.redis.xpending_range(
            stream, CONSUMER_GROUP, min="-", max="+", count=1
        )
        live = [e for e in fresh if e["time_since_delivered"] < DEAD_HOLD_MS]
        return not live
    except (RedisError, RedisClusterException, RuntimeError):
        return False


async def _kept(run: Run) -> set[str]:
    """Member task ids whose outcome the Cluster holds now: those in an open
    group's done set, and every member of a group past open (its outcomes were
    all recorded; a finished group keeps no done set)."""
    fanin = find_fanin(run.app.broker)

    async def read() -> set[str]:
        found: set[str] = set()
        for g in range(GROUPS):
            status = await group_status(fanin, f"g{g}")
            if status.state is not GroupState.OPEN:
                found |= {f"g{g}~{i}" for i in range(MEMBERS)}
                continue
            done = await run.redis.smembers(GroupKeys(run.prefix, f"g{g}").done)
            found |= {f"g{g}~{int(i)}" for i in done}
        return found

    kept: set[str] = set()

    async def done_reading() -> bool:
        try:
            kept.update(await read())
        except (RedisError, RedisClusterException):
            return False  # the client has not found the new primary yet
        return True

    await eventually(done_reading, timeout=RECOVERY, what="the outcomes kept")
    return kept


async def _sweeps(run: Run) -> list[SweepReport]:
    """Sweep (re-driving) until every continuation and last step has run."""
    reports: list[SweepReport] = []

    async def swept() -> bool:
        try:
            reports.append(await sweep(run.app.broker, policy="redrive"))
        except (RedisError, RedisClusterException, TaskiqError, OSError):
            return False  # the Cluster is still switching
        return await _finished(run)

    await eventually(swept, timeout=RECOVERY, interval=1.0, what="the repair")
    return reports


@pytest.mark.parametrize("durability", ["acknowledged", "replicated"])
async def test_b_cluster_failover_mid_run_runs_every_continuation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    env: dict[str, Any] = {"MEMBER_SECONDS": "0.05", "STEP_SECONDS": "0.3"}
    # Run leases outlast the switch: a continuation running through it keeps
    # its own.
    env |= {"DEADLINE": str(DEADLINE), "FINALISER_LEASE": str(RUN_LEASE)}
    if durability != "acknowledged":
        env["DURABILITY"] = durability
    async with cluster_run(tmp_path, monkeypatch, **env) as run:
        member = run.app.member.task_name
        started = time.monotonic()
        with run.worker("a"), run.worker("b"):
            await _start(run)
            await eventually(
                lambda: _delivered_at_least(run, member, KILL_AFTER),
                what="the members to be under way",
            )
            old = run.target
            replica = replica_of(run.cluster, old)
            await _fall_behind(old, replica)
            old.kill()
            killed = time.monotonic() - started
            # Recorded before the kill; nothing can be recorded on the old
            # primary's slots until its replica is promoted.
            recorded = set(await run.obs.smembers(run.key("recorded")))
            replica.resume()
            await promoted(replica)
            failover = time.monotonic() - started - killed
            kept = await _kept(run)
            # The operator's repair: the dead node back, as the new one's replica.
            await asyncio.to_thread(old.restart, crash=True)
            await eventually(
                lambda: _replicates(old), timeout=RECOVERY, what="the node to rejoin"
            )
            rejoined = time.monotonic() - started - killed
            reports = await _sweeps(run)
            await eventually(
                lambda: _drained(run), timeout=RECOVERY, what="the stream to drain"
            )
            # Held for good by reads and acknowledgements that died.
            held = await run.redis.xpending(run.app.STREAM, CONSUMER_GROUP)
            continuations = await run.counted("continuations")
            steps = await run.counted("steps")
            deliveries = await run.counted("delivered_ids")
            delivered = await run.delivered(member)
            succeeded = await run.counted("succeeded")
        logs = "".join(p.read_text(errors="replace") for p in tmp_path.glob("*.log"))

    lost = recorded - kept
    members = {k: v for k, v in deliveries.items() if k.startswith("g")}
    redriven = sum(
        f.missing_count
        for report in reports
        for f in report.findings
        if f.action is SweepAction.REDRIVE and f.applied
    )
    summary(
        f"cluster failover ({durability})",
        members_delivered=delivered,
        redelivered=sum(n - 1 for n in members.values() if n > 1),
        redriven_by_sweep=redriven,
        outcomes_lost=len(lost),
        entries_held_dead=held["pending"],
        continuations_run=sum(continuations.values()),
        last_steps_run=sum(steps.get(f"c{c}~{STEPS - 1}", 0) for c in range(CHAINS)),
        sweeps=len(reports),
        hooks_retried=logs.count("Redis is away"),
        killed_at_s=round(killed, 1),
        failover_s=round(failover, 1),
        rejoined_s=round(rejoined, 1),
        seconds=round(time.monotonic() - started, 1),
    )
    last_steps = [steps.get(f"c{c}~{STEPS - 1}", 0) for c in range(CHAINS)]
    if durability == "replicated":
        # The promise: nothing recorded is lost, every body runs once.
        assert lost == set()
        assert continuations == {f"g{g}": 1 for g in range(GROUPS)}
        assert last_steps == [1] * CHAINS
    else:
        # Without it a guard's write may vanish in the switch (guarantees.md:
        # not promised): every group and chain ends, a double is reported.
        assert set(continuations) == {f"g{g}" for g in range(GROUPS)}
        assert all(last_steps), last_steps
    # Every group's continuation saw all its members: what the switch lost was
    # re-driven from the ledger and recorded.
    assert succeeded == {f"g{g}": MEMBERS for g in range(GROUPS)}


async def _fall_behind(primary: RedisServer, replica: RedisServer) -> None:
    """The replica falls behind its primary (frozen, its link dropped) until
    the primary holds ``BEHIND_BYTES`` of writes the replica lacks: the writes
    a failover loses, unless they were refused as not replicated."""
    replica.suspend()
    with redis.Redis(host=primary.host, port=primary.port) as direct:
        direct.execute_command("CLIENT", "KILL", "TYPE", "replica")
    start = int(replication_info(primary)["master_repl_offset"])

    def ahead() -> bool:
        offset = int(replication_info(primary)["master_repl_offset"])
        return offset - start >= BEHIND_BYTES

    await eventually(ahead, timeout=RECOVERY, what="writes the replica lacks")


async def _delivered_at_least(run: Run, task_name: str, least: int) -> bool:
    return await run.delivered(task_name) >= least


async def _replicates(node: RedisServer) -> bool:
    """Whether ``node`` is a replica whose link to its primary is up."""
    try:
        info = await asyncio.to_thread(replication_info, node)
    except RedisError:
        return False
    return info.get("role") == "slave" and info.get("master_link_status") == "up"
