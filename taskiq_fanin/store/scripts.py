"""The Lua scripts, loaded from package data, and what every wrapper shares.

Each script lives in ``lua/<verbNoun>-<number of keys>.lua`` and is registered
once per client with redis-py's ``register_script`` (EVALSHA, reloaded on
NOSCRIPT), behind ``lua/prelude.lua``: Redis's clock (``TIME``: no script is
given a caller's clock) and the state tables of ``model/states.py``. Every key
goes in through KEYS, which keeps the scripts Cluster-safe.
"""

from functools import cache
from importlib import resources

from redis.asyncio import Redis, RedisCluster
from redis.commands.core import AsyncScript

from taskiq_fanin.model.states import lua_table

RedisClient = Redis | RedisCluster

#: The scripts of a group, by wrapper name; they all take the group's 7 keys
#: (``createGroup`` also the record key of a chain of the same id).
GROUP_SCRIPT_FILES = {
    "create_group": "createGroup-8.lua",
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
    "schedule": "scheduleGroup-1.lua",
}
#: The scripts of a chain's workflow record; they take its 2 keys
#: (``startChain`` also the meta key of a group of the same id).
CHAIN_SCRIPT_FILES = {
    "start": "startChain-3.lua",
    "advance": "advanceChain-2.lua",
    "finish": "finishChain-2.lua",
    "fail": "failChain-2.lua",
    "failed": "failedChain-2.lua",
    "cancel": "cancelChain-2.lua",
    "begin_step": "beginStep-2.lua",
    "release_step": "releaseStep-2.lua",
    "inspect": "inspectChain-2.lua",
    "redrive": "redriveChain-2.lua",
}
#: Every script the package ships.
SCRIPT_FILES = {**GROUP_SCRIPT_FILES, **CHAIN_SCRIPT_FILES}


def read_script(filename: str) -> str:
    """A packaged Lua script as it is loaded: behind the shared prelude."""
    return prelude() + _source(filename)


def _source(filename: str) -> str:
    return resources.files(__package__).joinpath("lua").joinpath(filename).read_text()


@cache
def prelude() -> str:
    """What every script is loaded behind: Redis's clock and the state tables."""
    return _source("prelude.lua").replace("__MOVES__", lua_table()) + "\n"


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
