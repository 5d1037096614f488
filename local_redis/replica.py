"""A throwaway replica of a loopback server, in sync before it is handed over.

For ``durability="replicated"`` (``WAIT``) without Sentinel or a Cluster: the
tests and the benchmarks that measure what waiting for a replica costs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from urllib.parse import urlparse

import redis

from local_redis.server import RedisServer
from local_redis.waiting import poll_until

#: Seconds a new replica may take to load its primary's data.
SYNC_TIMEOUT = 20.0


def in_sync(replica_url: str) -> bool:
    """Whether the replica at ``replica_url`` is linked to its primary."""
    with redis.Redis.from_url(replica_url) as client:
        info = client.info("replication")
    return bool(info.get("master_link_status") == "up")


@contextlib.contextmanager
def replica_of(primary_url: str) -> Iterator[RedisServer]:
    """A ``redis-server`` replicating ``primary_url``, linked; stopped at the end."""
    primary = urlparse(primary_url)
    args = ["--replicaof", primary.hostname or "127.0.0.1", str(primary.port)]
    with RedisServer(extra_args=args) as replica:
        if not poll_until(lambda: in_sync(replica.url), timeout=SYNC_TIMEOUT):
            msg = f"the replica of {primary_url} did not sync in {SYNC_TIMEOUT:g} s"
            raise RuntimeError(msg)
        yield replica
