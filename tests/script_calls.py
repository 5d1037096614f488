"""The group scripts driven as the store drives them, for tests of the real Lua
(on fakeredis through lupa, and on a real redis-server): a group's options as
planning writes them, and a group created with them.
"""

from redis.asyncio import Redis

from taskiq_fanin.storage.group_scripts import GroupScripts
from taskiq_fanin.storage.keys import GroupKeys
from taskiq_fanin.storage.replies import Created
from taskiq_fanin.transport.pipeline import PipelineBatcher

TOKEN = "t0k3n"


def scripts_on(client: Redis, pipeline: PipelineBatcher | None = None) -> GroupScripts:
    """The group scripts on ``client``, with a pipeline of their own."""
    return GroupScripts(client, pipeline or PipelineBatcher(client))


#: A group's options as planning writes them into its meta.
OPTIONS = {
    "then": '{"t":"then"}',
    "on_error": "",
    "policy": "continue",
    "sweep": "report",
    "span": 60_000,
    "ttl": 3_600_000,
    "cancellable": 0,
    "depth": 1,
}


async def create(
    scripts: GroupScripts, keys: GroupKeys, total: int = 3, token: str = TOKEN
) -> tuple[Created, str]:
    created, group_token, *_ = await scripts.create_group(
        keys,
        token=token,
        options=OPTIONS,
        members=[f'{{"t":"m","a":[{i}]}}' for i in range(total)],
        planner_lease_ms=60_000,
        claimant="planner",
    )
    return created, group_token
