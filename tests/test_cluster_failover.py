"""A Redis Cluster failover that loses acknowledged writes, and the durability
that loses none of them.

A real Cluster of three primaries with a replica each (``cluster-node-timeout``
1 s). Twenty writers send writes through the library's pipeline (the one place
the store sends its writes); then one primary's replica falls behind (SIGSTOP,
its link dropped), the primary is SIGKILLed and the replica, resumed, is
promoted. Afterwards each write the pipeline reported done is looked up. The
default durability lost some (the primary acknowledged what its replica never
had); ``durability="replicated"`` lost none: a write the replica did not
acknowledge in time was reported not done (``NotReplicatedError``), to be
retried. Counts are printed.
"""

import asyncio
import time
from collections import Counter
from typing import Any

import pytest
import redis

from local_redis import RedisCluster, RedisServer, eventually
from taskiq_fanin.transport.client import connect
from taskiq_fanin.transport.pipeline import PipelineBatcher
from taskiq_fanin.transport.replication import Replication
from taskiq_fanin.transport.retrying import retrying
from tests.cluster_nodes import PROMOTION, promoted, replica_of, replication_info

pytestmark = [pytest.mark.cluster, pytest.mark.faults]

WRITERS = 20
#: Seconds of writes before the fault, and of the replica behind.
BEFORE, BEHIND = 1.0, 0.5


async def present(client: Any, key: str) -> bool:
    """Whether ``key`` exists, asked until the client has found the new primary."""
    deadline = time.monotonic() + PROMOTION
    while True:
        try:
            return bool(await client.exists(key))
        except redis.RedisError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)


async def failover(replicated: bool) -> dict[str, Any]:
    """Writes reported done, and how many of them the failover lost."""
    with RedisCluster(replicas=1, node_timeout_ms=1000) as cluster:
        client = connect(
            cluster.url, max_connections=32, socket_timeout=2.0, cluster=True
        )
        await client.initialize()
        pipeline = PipelineBatcher(
            client, replication=Replication(1, 200) if replicated else None
        )
        primary = next(
            n for n in cluster.nodes if replication_info(n)["role"] == "master"
        )
        replica = replica_of(cluster, primary)
        done: set[str] = set()
        refused: Counter[str] = Counter()
        writing = True

        async def writer(name: int) -> None:
            sent = 0
            while writing:
                key = f"w:{{{name}-{sent}}}"
                try:
                    await pipeline(lambda pipe, key=key: pipe.set(key, 1), written=key)
                except redis.RedisError as error:
                    refused[type(error).__name__] += 1
                    await asyncio.sleep(0.05)
                else:
                    done.add(key)
                    sent += 1

        writers = [asyncio.create_task(writer(n)) for n in range(WRITERS)]
        try:
            await asyncio.sleep(BEFORE)  # the writes' length, not a wait for a race
            replica.suspend()  # the replica falls behind ...
            with redis.Redis(host=primary.host, port=primary.port) as direct:
                direct.execute_command("CLIENT", "KILL", "TYPE", "replica")
            await asyncio.sleep(BEHIND)
            primary.kill()  # ... and its primary dies
            replica.resume()
            await promoted(replica)
        finally:
            writing = False
            await asyncio.gather(*writers)
        lost = 0
        for key in sorted(done):
            lost += not await present(client, key)
        await client.aclose()
    return {"done": len(done), "lost": lost, "refused": dict(refused)}


async def test_a_failover_loses_acknowledged_writes_and_none_replicated() -> None:
    acknowledged = await failover(replicated=False)
    replicated = await failover(replicated=True)
    print(f"\nfailover, acknowledged: {acknowledged}")
    print(f"failover, replicated:   {replicated}")
    # The fault is real: the default lost writes it had reported done ...
    assert acknowledged["lost"] > 0
    # ... and the durability lost none, having refused what was not replicated.
    assert replicated["lost"] == 0
    assert replicated["refused"].get("NotReplicatedError", 0) > 0
    assert replicated["done"] > 0


def cluster_state(node: RedisServer) -> str:
    """What ``node`` says of the cluster: ``ok``, or ``fail`` (some slot has
    no primary: every node answers CLUSTERDOWN)."""
    with redis.Redis(host=node.host, port=node.port, socket_timeout=1) as client:
        info = client.execute_command("CLUSTER", "INFO")
    text = info.decode() if isinstance(info, bytes) else str(info)
    fields = dict(line.split(":", 1) for line in text.split() if ":" in line)
    return fields.get("cluster_state", "").strip()


async def test_a_hook_rides_through_a_cluster_down_until_its_node_is_back() -> None:
    """While a primary is down and no replica has taken its slots, every node
    answers CLUSTERDOWN (a failover under way, or none possible): Redis away,
    which a hook retries until the node is back, as it does a restart."""
    with RedisCluster(node_timeout_ms=1000) as cluster:
        client = connect(
            cluster.url, max_connections=8, socket_timeout=2.0, cluster=True
        )
        await client.initialize()
        down = cluster.nodes[1]  # not the client's startup node
        # A key on a node that stays up: all it meets is the cluster down.
        key = next(
            key
            for key in (f"recorded-{n}" for n in range(100))
            if client.get_node_from_key(key).port != down.port
        )
        down.kill()
        await eventually(
            lambda: cluster_state(cluster.nodes[0]) == "fail",
            timeout=PROMOTION,
            what="the cluster to be down",
        )
        met: list[BaseException] = []

        async def work() -> object:
            try:
                return await client.set(key, 1)
            except Exception as error:
                met.append(error)
                raise

        task = asyncio.create_task(
            retrying(work, retry_for=60, what=("recording", "an outcome"))
        )
        try:
            await eventually(
                lambda: task.done() or len(met) >= 2, timeout=PROMOTION, what="a try"
            )
            assert not task.done(), f"gave up at once: {task.exception()!r}"
            await asyncio.to_thread(down.restart, crash=True)
            assert await asyncio.wait_for(task, PROMOTION) is True
        finally:
            task.cancel()
            await client.aclose()
        kinds = sorted({type(error).__name__ for error in met})
        print(f"\nmet while the cluster was down: {kinds}")
