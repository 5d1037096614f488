"""A worker app for the Cluster failover test, on taskiq-redis's
``RedisStreamClusterBroker``, with the library on the same Cluster
(``cluster=True``).

The Sentinel failover's app (``tests.sentinel_app``) on a Cluster: the same
tasks and observations (``tests.failover_tasks``), under task names of its own.
Configured from the environment (and ``tests.failover_tasks``'s variables):

- ``REDIS_CLUSTER_URL``: one node of the Cluster (the others are found from it).
- ``QUEUE``: the broker's stream (the test picks its name, so its slot).
- ``OBS_URL``: a plain Redis that no fault touches, where the workers say what
  they did (``obs_key``), so that no count is lost with a primary.
- ``APP_PREFIX``: the library's keys and the observation keys.
"""

import os

from taskiq_redis import RedisStreamClusterBroker

from tests.failover_tasks import Observer, install

REDIS_CLUSTER_URL = os.environ.get("REDIS_CLUSTER_URL", "redis://127.0.0.1:7000")
OBS_URL = os.environ.get("OBS_URL", "redis://127.0.0.1:6380/0")
PREFIX = os.environ.get("APP_PREFIX", "cluster-failover-app")
STREAM = os.environ.get("QUEUE", f"{PREFIX}:stream")

observer = Observer(OBS_URL, PREFIX)
obs_key, obs = observer.key, observer.client

broker = RedisStreamClusterBroker(REDIS_CLUSTER_URL, queue_name=STREAM, xread_block=100)
tasks = install(
    broker, REDIS_CLUSTER_URL, observer, app="cluster_failover_app", cluster=True
)
member, publish, step = tasks.member, tasks.publish, tasks.step
