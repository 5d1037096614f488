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
nothing is left to run (``tests.failover_run.Run.drained``).

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
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.crc import key_slot
from redis.exceptions import RedisClusterException, RedisError

from local_redis import CONSUMER_GROUP, RedisCluster, RedisServer, eventually
from taskiq_fanin.api.broker import find_fanin
from tests.cluster_nodes import promoted, replica_of, replication_info
from tests.failover_run import (
    GROUPS,
    PACE,
    RECOVERY,
    RUN_LEASE,
    Run,
    check,
    loaded,
    print_summary,
)

pytestmark = [pytest.mark.faults, pytest.mark.cluster]

#: Bytes of writes the primary takes while its replica is behind, before it
#: is killed (an outcome recorded is a few hundred).
BEHIND_BYTES = 5_000
#: A group's deadline (s), past which the sweep re-drives its members without
#: an outcome: about when the run would end by itself, so that the repair
#: comes soon and re-drives few members that were only late.
DEADLINE = 8


@dataclasses.dataclass
class ClusterRun(Run):
    """A run on the test's own Cluster."""

    cluster: RedisCluster
    #: The primary to kill: the one holding most of the groups' slots.
    target: RedisServer

    errors = (RedisError, RedisClusterException)

    @property
    def redis(self) -> Any:
        """The test process's cluster client (the library's)."""
        return find_fanin(self.app.broker).context.redis

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[Any]:
        yield self.redis

    async def kept(self) -> set[str]:
        """As ``Run.kept``, read again until the client has found the new
        primary."""
        found: set[str] = set()

        async def done_reading() -> bool:
            try:
                found.update(await super(ClusterRun, self).kept())
            except self.errors:
                return False  # the client has not found the new primary yet
            return True

        await eventually(done_reading, timeout=RECOVERY, what="the outcomes kept")
        return found


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
) -> AsyncIterator[ClusterRun]:
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
        async with loaded("tests.cluster_failover_app", monkeypatch, env) as (
            app,
            obs,
        ):
            # Its kicks go several at once: set up its client first (its startup
            # closes it; a fresh one fails some callers, test_cluster_workflows.py).
            await app.broker.redis.initialize()
            yield ClusterRun(app, obs, prefix, env, tmp_path, cluster, target)


@pytest.mark.parametrize("durability", ["acknowledged", "replicated"])
async def test_b_cluster_failover_mid_run_runs_every_continuation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    env: dict[str, Any] = dict(PACE)
    # Run leases outlast the switch: a continuation running through it keeps
    # its own.
    env |= {"DEADLINE": str(DEADLINE), "FINALISER_LEASE": str(RUN_LEASE)}
    if durability != "acknowledged":
        env["DURABILITY"] = durability
    async with cluster_run(tmp_path, monkeypatch, **env) as run:
        started = time.monotonic()
        with run.worker("a"), run.worker("b"):
            await run.start()
            old = run.target
            replica = replica_of(run.cluster, old)
            await _fall_behind(old, replica)
            old.kill()
            killed = time.monotonic() - started
            # Recorded before the kill; nothing can be recorded on the old
            # primary's slots until its replica is promoted.
            were_recorded = await run.recorded()
            replica.resume()
            await promoted(replica)
            failover = time.monotonic() - started - killed
            were_kept = await run.kept()
            # The operator's repair: the dead node back, as the new one's replica.
            await asyncio.to_thread(old.restart, crash=True)
            await eventually(
                lambda: _replicates(old), timeout=RECOVERY, what="the node to rejoin"
            )
            rejoined = time.monotonic() - started - killed
            reports = await run.sweeps()
            await run.drain()
            # Held for good by reads and acknowledgements that died.
            held = await run.redis.xpending(run.app.STREAM, CONSUMER_GROUP)
            counts = await run.seen()
        counts.logs = run.read_logs()

    lost = were_recorded - were_kept
    print_summary(
        f"cluster failover ({durability})",
        counts,
        reports,
        lost,
        held=held["pending"],
        started=started,
        killed=killed,
        failover=failover,
        rejoined=rejoined,
    )
    check(durability, counts, lost)


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


async def _replicates(node: RedisServer) -> bool:
    """Whether ``node`` is a replica whose link to its primary is up."""
    try:
        info = await asyncio.to_thread(replication_info, node)
    except RedisError:
        return False
    return info.get("role") == "slave" and info.get("master_link_status") == "up"
