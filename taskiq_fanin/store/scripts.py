"""The Lua scripts, loaded from package data, and what every wrapper shares.

Each script lives in ``lua/<verbNoun>-<number of keys>.lua`` and is registered
once per client with redis-py's ``register_script`` (EVALSHA, reloaded on
NOSCRIPT). Every key goes in through KEYS and the clock through ARGV, which keeps
the scripts Cluster-safe and testable.
"""

from importlib import resources

from redis.asyncio import Redis, RedisCluster
from redis.commands.core import AsyncScript

RedisClient = Redis | RedisCluster

#: The scripts of a group, by wrapper name; they all take the group's 7 keys.
GROUP_SCRIPT_FILES = {
    "create_group": "createGroup-7.lua",
    "record_outcome": "recordOutcome-7.lua",
    "collect_outcomes": "collectOutcomes-7.lua",
    "mark_planned": "markPlanned-7.lua",
    "mark_dispatched": "markDispatched-7.lua",
    "mark_completed": "markCompleted-7.lua",
    "inspect_group": "inspectGroup-7.lua",
    "redrive_group": "redriveGroup-7.lua",
    "give_up": "giveUp-7.lua",
    "cancel_group": "cancelGroup-7.lua",
    "begin_continuation": "beginContinuation-7.lua",
    "reclaim_finaliser": "reclaimFinaliser-7.lua",
    "release_continuation": "releaseContinuation-7.lua",
    "release_lock": "releaseLock-1.lua",
}
#: The scripts of a chain's workflow record; they take its 2 keys.
CHAIN_SCRIPT_FILES = {
    "start": "startChain-2.lua",
    "advance": "advanceChain-2.lua",
    "finish": "finishChain-2.lua",
    "fail": "failChain-2.lua",
    "cancel": "cancelChain-2.lua",
}
#: Every script the package ships.
SCRIPT_FILES = {**GROUP_SCRIPT_FILES, **CHAIN_SCRIPT_FILES}


def read_script(filename: str) -> str:
    """The source of a packaged Lua script."""
    return resources.files(__package__).joinpath("lua").joinpath(filename).read_text()


def register(client: RedisClient, files: dict[str, str]) -> dict[str, AsyncScript]:
    """Register each script once on ``client``, by wrapper name."""
    return {
        name: client.register_script(read_script(filename))
        for name, filename in files.items()
    }


def text(value: object) -> str:
    """A Redis reply as text, whichever way the client decodes (nil: '')."""
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else str(value)
