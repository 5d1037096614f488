"""Throwaway ``redis-server`` processes for the tests, benchmarks and examples.

Not part of the package: it lives beside the tests and the benchmarks, which both
use it. Each server listens on a free loopback port and keeps nothing on disk::

    with RedisServer() as server:
        client = redis.asyncio.Redis.from_url(server.url)

    with RedisCluster() as cluster:  # three masters, no replicas
        client = redis.asyncio.RedisCluster.from_url(cluster.url)

``redis_url_from_env_or_server()`` prefers ``REDIS_URL`` when it is set, so the
same suite can run against a server someone else manages.
"""

from local_redis.cluster import RedisCluster
from local_redis.server import (
    LOOPBACK,
    REDIS_URL_ENV,
    RedisServer,
    free_port,
    redis_url_from_env_or_server,
    stop_process_group,
)

__all__ = [
    "LOOPBACK",
    "REDIS_URL_ENV",
    "RedisCluster",
    "RedisServer",
    "free_port",
    "redis_url_from_env_or_server",
    "stop_process_group",
]
