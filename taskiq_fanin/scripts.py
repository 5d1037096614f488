"""The Lua scripts, loaded from package data and wrapped by typed functions.

Each script lives in ``lua/<verbNoun>-<number of keys>.lua`` and is registered
once per client with redis-py's ``register_script`` (EVALSHA, reloaded by redis-py
on NOSCRIPT). Every key goes in through KEYS and the clock through ARGV, which
keeps the scripts Cluster-safe and testable.
"""

import enum
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

from redis.asyncio import Redis, RedisCluster

from taskiq_fanin.batching import Command, PipelineBatcher, ScriptBatcher
from taskiq_fanin.keys import GroupKeys
from taskiq_fanin.outcome_batching import OutcomeBatcher

RedisClient = Redis | RedisCluster

#: Scripts by name; the number after the dash is how many KEYS each takes.
SCRIPT_FILES = {
    "create_group": "createGroup-7.lua",
    "record_outcome": "recordOutcome-7.lua",
    "collect_outcomes": "collectOutcomes-7.lua",
    "mark_planned": "markPlanned-7.lua",
    "mark_dispatched": "markDispatched-7.lua",
    "mark_completed": "markCompleted-7.lua",
    "inspect_group": "inspectGroup-7.lua",
    "redrive_group": "redriveGroup-7.lua",
    "give_up": "giveUp-7.lua",
    "release_lock": "releaseLock-1.lua",
    "cancel_group": "cancelGroup-7.lua",
    "begin_continuation": "beginContinuation-7.lua",
    "reclaim_finaliser": "reclaimFinaliser-7.lua",
    "release_continuation": "releaseContinuation-7.lua",
}


class Created(enum.IntEnum):
    """Result of ``createGroup``."""

    CREATED = 1
    EXISTS = 2
    #: It exists, but its planner died before dispatching every member (it has
    #: not finished a finaliser lease after the group's creation).
    EXISTS_UNPLANNED = 3


class Begin(enum.IntEnum):
    """Result of ``beginContinuation``."""

    SKIP = 0
    RUN = 1
    RUNNING_ELSEWHERE = 2


class Outcome(str, enum.Enum):
    """A member's terminal outcome."""

    DONE = "done"
    FAILED = "failed"


class Recorded(enum.IntEnum):
    """Result of ``recordOutcome``: codes, never strings to parse."""

    RECORDED = 1
    CLAIMED = 2
    DUPLICATE = 3
    CONFLICT = 4
    NO_GROUP = 5
    NOT_MEMBER = 6
    TOKEN_MISMATCH = 7
    FINALISED = 8


@dataclass(frozen=True)
class Inspected:
    """What ``inspectGroup`` read: the group as the sweep judges it."""

    meta: dict[str, str]
    lease_held: bool
    missing: list[int]


@dataclass(frozen=True)
class Redriven:
    """What ``redriveGroup`` did: the re-drive count, and the members to kick."""

    redriven: bool
    redrives: int
    members: dict[int, str]


@dataclass(frozen=True)
class CollectedOutcomes:
    """What ``collectOutcomes`` read: the raw material of a ``GroupResult``."""

    total: int
    then: str
    on_error: str
    policy: str
    state: str
    span_ms: int
    lost: list[int]
    done: list[int]
    failed: list[int]
    results: dict[int, Any]
    errors: dict[int, Any]


def text(value: object) -> str:
    """A Redis reply as text, whichever way the client decodes (nil: '')."""
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else str(value)


def _collected(reply: list[Any]) -> CollectedOutcomes:
    """``collectOutcomes``'s reply (also what ``recordOutcome`` hands a claimant)."""
    total, then, on_error, policy, state, span, lost = reply[:7]
    done, failed, results, errors = reply[7:]
    return CollectedOutcomes(
        total=int(total),
        then=text(then),
        on_error=text(on_error),
        policy=text(policy),
        state=text(state),
        span_ms=int(span),
        lost=[int(index) for index in text(lost).split(",") if index],
        done=sorted(int(member) for member in done),
        failed=sorted(int(member) for member in failed),
        results=_json_by_index(results),
        errors=_json_by_index(errors),
    )


def _json_by_index(flat: list[bytes | str]) -> dict[int, Any]:
    fields, values = flat[::2], flat[1::2]
    return {
        int(field): json.loads(value)
        for field, value in zip(fields, values, strict=True)
    }


def read_script(filename: str) -> str:
    """The source of a packaged Lua script."""
    return (
        resources.files("taskiq_fanin").joinpath("lua").joinpath(filename).read_text()
    )


class Scripts:
    """The scripts registered on one client, one typed method per script.

    Calls go through :class:`PipelineBatcher` s: calls made together (members
    finishing at once, continuations starting at once, planners) share a round
    trip.
    """

    def __init__(self, client: RedisClient) -> None:
        self._batcher = PipelineBatcher(client)
        registered = {
            name: client.register_script(read_script(filename))
            for name, filename in SCRIPT_FILES.items()
        }
        self._scripts: dict[str, ScriptBatcher] = {
            name: ScriptBatcher(self._batcher, script)
            for name, script in registered.items()
        }
        # Members of one group finishing together share one script call.
        self._record_outcome = OutcomeBatcher(
            self._batcher, registered["record_outcome"]
        )

    def member_started(self, keys: GroupKeys, *, token: str, index: int) -> None:
        """A member starts running here: outcomes of its group may wait for it."""
        self._record_outcome.started(keys.all, token, index)

    def member_ended(self, keys: GroupKeys, *, token: str, index: int) -> None:
        """A member that started here is done, its outcome recorded or not."""
        self._record_outcome.ended(keys.all, token, index)

    async def send(self, command: Command) -> Any:
        """A plain command (``lambda pipe: pipe.zrem(...)``) in the shared pipeline."""
        return await self._batcher(command)

    async def create_group(
        self,
        keys: GroupKeys,
        *,
        token: str,
        now_ms: int,
        deadline_ms: int,
        expires_ms: int,
        then: str,
        on_error: str,
        policy: str,
        sweep_policy: str,
        span_ms: int,
        depth: int,
        cancellable: bool,
        members: list[str],
        planner_lease_ms: int,
    ) -> tuple[Created, str]:
        """Write meta and ledger; returns the code and the group's token."""
        code, group_token, *existing = await self._scripts["create_group"](
            keys=keys.all,
            args=[
                token,
                now_ms,
                deadline_ms,
                expires_ms,
                then,
                on_error,
                policy,
                sweep_policy,
                span_ms,
                depth,
                int(cancellable),
                len(members),
                *members,
            ],
        )
        if code == Created.EXISTS:
            planned, created = (text(value) for value in existing)
            # Still unplanned a lease after creation: its planner died mid-way.
            if planned != "1" and now_ms - int(created) > planner_lease_ms:
                code = Created.EXISTS_UNPLANNED
        return Created(code), text(group_token)

    async def record_outcome(
        self,
        keys: GroupKeys,
        *,
        token: str,
        index: int,
        outcome: Outcome,
        payload: str,
        now_ms: int,
        lease_ms: int,
        claimant: str,
    ) -> tuple[Recorded, "CollectedOutcomes | None"]:
        """Record one member's outcome; ``CLAIMED`` means: you finalise.

        The claimant also gets what the finaliser needs (``collect_outcomes``).
        """
        code, collected = await self._record_outcome(
            keys.all,
            token,
            head=(now_ms, lease_ms, claimant),
            member=(index, outcome.value, payload),
        )
        recorded = Recorded(code)
        if recorded is Recorded.CLAIMED:
            return recorded, _collected(collected)
        return recorded, None

    async def collect_outcomes(
        self, keys: GroupKeys, *, token: str
    ) -> CollectedOutcomes | None:
        """Read what the finaliser needs; ``None`` if the group is gone."""
        reply = await self._scripts["collect_outcomes"](keys=keys.all, args=[token])
        return _collected(reply) if reply else None

    async def mark_planned(self, keys: GroupKeys, *, token: str) -> bool:
        """Note that every member was dispatched."""
        return bool(await self._scripts["mark_planned"](keys=keys.all, args=[token]))

    async def mark_dispatched(
        self,
        keys: GroupKeys,
        *,
        token: str,
        now_ms: int,
        dispatched: str,
        tombstone_ms: int,
        claimant: str,
    ) -> bool:
        """Note which continuation was enqueued and release the lease if ours."""
        return bool(
            await self._scripts["mark_dispatched"](
                keys=keys.all,
                args=[token, now_ms, dispatched, tombstone_ms, claimant],
            )
        )

    async def mark_completed(
        self, keys: GroupKeys, *, token: str, now_ms: int, tombstone_ms: int
    ) -> bool:
        """Shrink a group whose continuation ran to a tombstone."""
        return bool(
            await self._scripts["mark_completed"](
                keys=keys.all, args=[token, now_ms, tombstone_ms]
            )
        )

    async def inspect_group(self, keys: GroupKeys) -> Inspected | None:
        """Meta, lease and missing members of a group; ``None`` if it is gone."""
        reply = await self._scripts["inspect_group"](keys=keys.all)
        if not reply:
            return None
        meta, lease_held, missing = reply
        fields = [text(value) for value in meta]
        return Inspected(
            meta=dict(zip(fields[::2], fields[1::2], strict=True)),
            lease_held=bool(lease_held),
            missing=[int(index) for index in missing],
        )

    async def redrive_group(
        self, keys: GroupKeys, *, token: str, now_ms: int, max_redrives: int
    ) -> Redriven:
        """Record a re-drive and read the ledger entries of the missing members."""
        reply = await self._scripts["redrive_group"](
            keys=keys.all, args=[token, now_ms, max_redrives]
        )
        code, redrives, *flat = reply
        return Redriven(
            redriven=code == 1,
            redrives=int(redrives),
            members={
                int(index): text(entry)
                for index, entry in zip(flat[::2], flat[1::2], strict=True)
            },
        )

    async def give_up(
        self, keys: GroupKeys, *, token: str, now_ms: int, lease_ms: int, claimant: str
    ) -> int | None:
        """Mark the missing members lost and claim; ``None`` if not open."""
        reply = await self._scripts["give_up"](
            keys=keys.all, args=[token, now_ms, lease_ms, claimant]
        )
        return int(reply[1]) if reply[0] == 1 else None

    async def release_lock(self, lock_key: str, holder: str) -> bool:
        """Delete ``lock_key`` if ``holder`` still holds it."""
        return bool(await self._scripts["release_lock"](keys=[lock_key], args=[holder]))

    async def cancel_group(self, keys: GroupKeys, *, now_ms: int) -> bool:
        """Cancel an open group; False if it is missing or not open."""
        return bool(await self._scripts["cancel_group"](keys=keys.all, args=[now_ms]))

    async def begin_continuation(
        self, keys: GroupKeys, *, token: str, now_ms: int, attempt: int
    ) -> Begin:
        """May this delivery of the continuation run (one copy at a time)?"""
        code = await self._scripts["begin_continuation"](
            keys=keys.all, args=[token, now_ms, attempt]
        )
        return Begin(code)

    async def reclaim_finaliser(
        self, keys: GroupKeys, *, token: str, now_ms: int, lease_ms: int, claimant: str
    ) -> bool:
        """Take over a claimed group whose finaliser's lease ran out."""
        return bool(
            await self._scripts["reclaim_finaliser"](
                keys=keys.all, args=[token, now_ms, lease_ms, claimant]
            )
        )

    async def release_continuation(
        self, keys: GroupKeys, *, token: str, attempt: int
    ) -> bool:
        """Give up an attempt's run lease so that its retry may run."""
        return bool(
            await self._scripts["release_continuation"](
                keys=keys.all, args=[token, attempt]
            )
        )
