"""The toolkit of the tests and the benchmarks.

Throwaway servers, worker processes, waiting with a deadline, counting commands.

Not part of the package (the wheel holds ``taskiq_fanin`` alone): it lives beside
the tests and the benchmarks, which both use it, as do the tests that run the
examples' READMEs. (The examples themselves stay plain taskiq and redis-py, to
be read and copied.)

- ``RedisServer`` / ``RedisCluster``: throwaway ``redis-server`` processes on
  free loopback ports, keeping nothing on disk;
  ``redis_url_from_env_or_server()`` prefers ``REDIS_URL`` when it is set, and
  ``provide_redis()`` falls back on an embedded fakeredis too (``provider``);
- ``RedisSentinel``: a primary, a replica and three sentinels
  (``redis-server --sentinel``) on free loopback ports; ``kill_primary()``
  SIGKILLs the primary and waits for a replica's promotion (``sentinel``,
  ``sentinel_node``); ``LOCAL_REDIS_KEEP_LOGS=<dir>`` keeps a copy of every
  stopped server's log there (``kept_logs``);
- ``TaskiqWorker`` / ``process_group``: a ``taskiq worker`` (or any command) in
  its own process group, stopped for certain: SIGTERM, then SIGKILL after a
  grace, until the group is empty (``workers``, ``processes``);
- ``wait_until`` / ``eventually`` / ``poll_until``: a condition with a deadline
  (``waiting``);
- ``replica_of``: a replica of a loopback server, in sync (``replica``);
- ``DuplicatingMiddleware``: at-least-once delivery, simulated;
- ``commandstats`` / ``MonitorTap``: what a server ran, executed commands and
  client round trips (``counting``).

::

    with RedisServer() as server:
        client = redis.asyncio.Redis.from_url(server.url)

    with RedisCluster() as cluster:  # three masters, no replicas
        client = redis.asyncio.RedisCluster.from_url(cluster.url)
"""

from local_redis.cluster import RedisCluster
from local_redis.counting import MonitorTap, Tally, commandstats, commandstats_calls
from local_redis.duplicating import DuplicatingMiddleware
from local_redis.host import LOOPBACK, free_port
from local_redis.processes import (
    alive,
    children_of,
    group_cpu_seconds,
    process_group,
    start_in_own_group,
    stop_process_group,
    taskiq_worker_command,
    with_pythonpath,
)
from local_redis.provider import (
    CONSUMER_GROUP,
    RedisProvider,
    delete_keys,
    fake_server,
    provide_redis,
    redis_url_from_env_or_server,
    stream_drained,
)
from local_redis.replica import replica_of
from local_redis.sentinel import RedisSentinel
from local_redis.server import REDIS_URL_ENV, RedisServer
from local_redis.waiting import eventually, poll_until, wait_until
from local_redis.workers import (
    TaskiqWorker,
    WorkerError,
    stop_all_workers,
    stop_workers_at_exit,
)

__all__ = [
    "CONSUMER_GROUP",
    "LOOPBACK",
    "REDIS_URL_ENV",
    "DuplicatingMiddleware",
    "MonitorTap",
    "RedisCluster",
    "RedisProvider",
    "RedisSentinel",
    "RedisServer",
    "Tally",
    "TaskiqWorker",
    "WorkerError",
    "alive",
    "children_of",
    "commandstats",
    "commandstats_calls",
    "delete_keys",
    "eventually",
    "fake_server",
    "free_port",
    "group_cpu_seconds",
    "poll_until",
    "process_group",
    "provide_redis",
    "redis_url_from_env_or_server",
    "replica_of",
    "start_in_own_group",
    "stop_all_workers",
    "stop_process_group",
    "stop_workers_at_exit",
    "stream_drained",
    "taskiq_worker_command",
    "wait_until",
    "with_pythonpath",
]
