"""The Lua scripts, found in package data, and what every wrapper shares.

Each script is a file ``lua/<verbNoun>-<number of keys>.lua``; the folder is
read, not listed (a hand-written map beside it drifts). A wrapper asks for its
script by name (``recordOutcome``): registered on first use with redis-py's
``register_script`` (EVALSHA, reloaded on NOSCRIPT), once per wrapper, behind
``lua/prelude.lua``: Redis's clock (``TIME``: no script is given a caller's
clock), the state tables of ``domain/states.py`` and the reply codes of
``storage/replies.py``. Every key goes in through KEYS, which keeps the scripts
Cluster-safe.
"""

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from redis.commands.core import AsyncScript

from taskiq_fanin.domain.states import lua_table
from taskiq_fanin.storage.replies import REPLY_CODES
from taskiq_fanin.transport.client import RedisClient
from taskiq_fanin.transport.pipeline import PipelineBatcher, ScriptBatcher

#: The folder of the scripts, in the package's data.
_FOLDER = resources.files(__package__).joinpath("lua")
PRELUDE = "prelude.lua"
_NAMED = re.compile(r"(?P<name>[a-z][A-Za-z]+)-(?P<keys>\d+)\.lua")
#: The scripts that write nothing: under replicated durability, no WAIT follows.
READS = frozenset(
    {"checkContinuation", "checkOnError", "inspectChain", "inspectGroup", "listDue"}
)


@dataclass(frozen=True)
class PackagedScript:
    """One script file: its name, the number of keys it takes, its source."""

    name: str
    #: How many keys it is called with, from its file name.
    keys: int
    filename: str

    @property
    def source(self) -> str:
        """The script as it is loaded: behind the shared prelude."""
        return prelude() + _source(self.filename)


@cache
def packaged() -> dict[str, PackagedScript]:
    """Every script the package ships, by name, as its folder holds them."""
    found: dict[str, PackagedScript] = {}
    for entry in _FOLDER.iterdir():
        if not entry.name.endswith(".lua") or entry.name == PRELUDE:
            continue
        named = _NAMED.fullmatch(entry.name)
        if named is None:
            raise ValueError(f"{entry.name}: a script is named verbNoun-<keys>.lua")
        name = named["name"]
        if name in found:
            raise ValueError(f"{entry.name}: {found[name].filename} has its name")
        found[name] = PackagedScript(name, int(named["keys"]), entry.name)
    return dict(sorted(found.items()))


class Scripts:
    """The packaged scripts on one client, by name, through a shared pipeline."""

    def __init__(self, client: RedisClient, pipeline: PipelineBatcher) -> None:
        self._client = client
        self._pipeline = pipeline
        self._registered: dict[str, ScriptBatcher] = {}

    def __getitem__(self, name: str) -> ScriptBatcher:
        """The script ``name`` (``recordOutcome``), registered on first use."""
        script = self._registered.get(name)
        if script is None:
            source = packaged()[name].source
            registered = self._client.register_script(source)
            script = ScriptBatcher(self._pipeline, registered, writes=name not in READS)
            self._registered[name] = script
        return script

    def registered(self, name: str) -> AsyncScript:
        """The script ``name`` as redis-py registered it (to call it directly)."""
        return self[name].script


def _source(filename: str) -> str:
    return _FOLDER.joinpath(filename).read_text()


@cache
def prelude() -> str:
    """What every script is loaded behind: the clock, the states, the codes."""
    return (
        _source(PRELUDE)
        .replace("__MOVES__", lua_table())
        .replace("__CODES__", lua_codes())
        + "\n"
    )


def lua_codes() -> str:
    """The reply codes as Lua tables (``local Recorded = codes('Recorded', ...)``)."""
    return "\n".join(
        f"local {codes.__name__} = codes('{codes.__name__}', {{"
        + ", ".join(f"{member.name} = {member.value}" for member in codes)
        + "})"
        for codes in REPLY_CODES
    )
