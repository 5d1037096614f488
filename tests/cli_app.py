"""A user's app as ``taskiq-fanin sweep --broker tests.cli_app:broker`` imports it.

Built at import from the environment, as a deployed app would be: ``REDIS_URL``,
``FANIN_PREFIX`` and ``FANIN_QUEUE`` (the test's own, so nothing is shared).
The tests plan members of ``resize`` from their own process under the same name.
"""

import os

from taskiq_redis import RedisStreamBroker

from taskiq_fanin import FanInMiddleware

broker = RedisStreamBroker(
    os.environ["REDIS_URL"], queue_name=os.environ["FANIN_QUEUE"]
).with_middlewares(
    FanInMiddleware(os.environ["REDIS_URL"], prefix=os.environ["FANIN_PREFIX"])
)


@broker.task(task_name="cli_app.resize")
async def resize(image: int) -> str:
    return f"{image}.jpg"
