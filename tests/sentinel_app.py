"""A worker app for the Sentinel failover test, on taskiq-redis's
``RedisStreamSentinelBroker``, with the library on the same primary through its
``redis+sentinel://`` URL; its tasks and middlewares are ``tests.failover_tasks``'s.

Configured from the environment (and ``tests.failover_tasks``'s variables):

- ``REDIS_URL``: the primary, as ``redis+sentinel://host:port,.../<name>/0``;
  the broker is given the same sentinels and master name.
- ``OBS_URL``: a plain Redis that no fault touches, where the workers say what
  they did (``obs_key``), so that no count is lost with the primary.
- ``APP_PREFIX``: the library's keys, the stream and the observation keys.
"""

import os

from taskiq_redis import RedisStreamSentinelBroker

from taskiq_fanin.transport.sentinel import parse_sentinel_url
from tests.failover_tasks import Observer, install

REDIS_URL = os.environ.get("REDIS_URL", "redis+sentinel://127.0.0.1:26379/fanin/0")
OBS_URL = os.environ.get("OBS_URL", "redis://127.0.0.1:6380/0")
PREFIX = os.environ.get("APP_PREFIX", "sentinel-app")
STREAM = f"{PREFIX}:stream"

observer = Observer(OBS_URL, PREFIX)
obs_key, obs = observer.key, observer.client

address = parse_sentinel_url(REDIS_URL)
broker = RedisStreamSentinelBroker(
    list(address.sentinels),
    address.master_name,
    queue_name=STREAM,
    xread_block=100,
)
tasks = install(broker, REDIS_URL, observer, app="sentinel_app")
member, publish, step = tasks.member, tasks.publish, tasks.step
