"""``durability="replicated"`` on a real Redis Cluster of three masters with a
replica each: each pipeline's WAIT goes to the node of its writes' slots
(``target_nodes``: redis-py would send a keyless WAIT to every primary), with
``RedisStreamClusterBroker`` and real ``taskiq worker`` processes.
"""

from collections.abc import Iterator

import pytest
import redis

from local_redis import RedisCluster
from taskiq_fanin import Signature, chain, group
from taskiq_fanin.domain.ids import member_task_id
from tests.cluster_harness import app_on, published_at_least

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def replicated_cluster() -> Iterator[RedisCluster]:
    with RedisCluster(replicas=1) as cluster:
        yield cluster


def waits_by_primary(cluster: RedisCluster) -> dict[int, int]:
    """WAIT calls each master ran (replicas run none)."""
    found = {}
    for node in cluster.nodes:
        with redis.Redis(host=node.host, port=node.port) as client:
            if client.info("replication")["role"] != "master":
                continue
            stats = client.info("commandstats")
            found[node.port] = int(stats.get("cmdstat_wait", {}).get("calls", 0))
    return found


async def test_a_group_and_a_chain_wait_for_replicas_on_each_primary(
    replicated_cluster: RedisCluster, key_prefix: str
) -> None:
    from tests.harness import eventually

    before = waits_by_primary(replicated_cluster)
    url = replicated_cluster.url
    async with app_on(url, key_prefix, "stream", durability="replicated") as app:
        with app.worker():
            members = [Signature.of(app.task("member"), i) for i in range(20)]
            await group(members, then=app.task("publish"), group_id="album").kiq(
                app.broker
            )
            step = group([Signature.of(app.task("scaled"), i) for i in range(3)])
            await chain(
                Signature.of(app.task("first"), 1),
                step,
                Signature.of(app.task("publish")),
                chain_id="video",
            ).kiq(app.broker)
            await eventually(lambda: published_at_least(app, 2), what="both ends")
            await app.drained()
        published, runs = await app.published(), await app.runs()
    after = waits_by_primary(replicated_cluster)

    results = sorted(result["results"] for result in published)
    assert results == sorted([[i * 10 for i in range(20)], [200, 201, 202]])
    assert all(runs[member_task_id("album", i)] == 1 for i in range(20))
    # The writes of groups and chains spread over the slots: every primary
    # that took one ran WAITs, sent to it alone.
    waited = {port: after[port] - before.get(port, 0) for port in after}
    assert sum(waited.values()) > 0
    assert sum(1 for n in waited.values() if n) >= 2, waited
