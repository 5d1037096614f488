"""The nodes of a Redis Cluster of the test's own (``local_redis.RedisCluster``)
with a replica per primary, as the failover tests read them: a node's
replication, a primary's replica, and a replica's promotion awaited.
"""

import asyncio
import contextlib
import time
from typing import Any

import redis

from local_redis import RedisCluster, RedisServer

#: How long a promotion may take (node timeout 1 s, then an election).
PROMOTION = 20.0


def replication_info(node: RedisServer) -> dict[str, Any]:
    with redis.Redis(host=node.host, port=node.port, socket_timeout=1) as client:
        info: dict[str, Any] = client.info("replication")
        return info


def replica_of(cluster: RedisCluster, primary: RedisServer) -> RedisServer:
    port = int(replication_info(primary)["slave0"]["port"])
    return next(node for node in cluster.nodes if node.port == port)


async def promoted(node: RedisServer) -> None:
    deadline = time.monotonic() + PROMOTION
    while time.monotonic() < deadline:
        with contextlib.suppress(redis.RedisError):
            if replication_info(node)["role"] == "master":
                return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{node} was not promoted in {PROMOTION:g} s")
