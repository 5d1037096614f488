"""A chain's workflow record in Redis: where the chain is, and how it ended.

The answer to "where is my video?": current step, state, times, and the error of
a failed step. Every transition is one script on the record's own slot.
"""

import enum
import json
from datetime import datetime

from pydantic import BaseModel

from taskiq_fanin.keys import ChainKeys
from taskiq_fanin.models import from_millis
from taskiq_fanin.scripts import RedisClient, read_script, text

CHAIN_SCRIPT_FILES = {
    "start": "startChain-2.lua",
    "advance": "advanceChain-2.lua",
    "finish": "finishChain-2.lua",
    "fail": "failChain-2.lua",
    "cancel": "cancelChain-2.lua",
}


class ChainState(str, enum.Enum):
    """Life of a chain, one way only."""

    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    MISSING = "missing"


class Advanced(enum.IntEnum):
    """Result of ``advanceChain``."""

    GONE = 0
    ADVANCED = 1
    DUPLICATE = 2
    CANCELLED = 3


class ChainStatus(BaseModel):
    """A chain as its workflow record holds it right now."""

    chain_id: str
    state: ChainState
    #: Index of the step running (or, once over, one past the last that ran).
    step: int = 0
    steps: int = 0
    step_names: list[str] = []
    started: datetime | None = None
    updated: datetime | None = None
    failed_step: int | None = None
    error: str | None = None

    @property
    def current(self) -> str | None:
        """The name of the step the chain is at, while it runs."""
        if self.state is ChainState.RUNNING and self.step < len(self.step_names):
            return self.step_names[self.step]
        return None


class ChainRecord:
    """Typed wrappers of the chain scripts, registered once per client."""

    def __init__(self, client: RedisClient) -> None:
        self._client = client
        self._scripts = {
            name: client.register_script(read_script(filename))
            for name, filename in CHAIN_SCRIPT_FILES.items()
        }

    async def start(
        self,
        keys: ChainKeys,
        *,
        token: str,
        now_ms: int,
        names: str,
        steps: int,
        ttl_ms: int,
        pending: str,
    ) -> bool:
        """Create the record; False when the chain id exists."""
        created = await self._scripts["start"](
            keys=keys.all, args=[token, now_ms, steps, names, ttl_ms, pending]
        )
        return bool(created)

    async def advance(
        self,
        keys: ChainKeys,
        *,
        token: str,
        step: int,
        now_ms: int,
        compensation: str,
        ttl_ms: int,
        pending: str,
    ) -> Advanced:
        """Move past ``step`` once; ``ADVANCED`` means: kick the next step."""
        code = await self._scripts["advance"](
            keys=keys.all, args=[token, step, now_ms, compensation, ttl_ms, pending]
        )
        return Advanced(code)

    async def finish(
        self, keys: ChainKeys, *, token: str, step: int, now_ms: int
    ) -> bool:
        """Mark the chain done after its last step; True the first time only."""
        return bool(
            await self._scripts["finish"](keys=keys.all, args=[token, step, now_ms])
        )

    async def fail(
        self, keys: ChainKeys, *, token: str, step: int, now_ms: int, error: str
    ) -> list[str] | None:
        """Stop the chain at ``step``; the compensations to run, or None if not now."""
        reply = await self._scripts["fail"](
            keys=keys.all, args=[token, step, now_ms, error]
        )
        return [text(c) for c in reply[1:]] if reply[0] == 1 else None

    async def cancel(
        self, keys: ChainKeys, *, now_ms: int
    ) -> tuple[int, list[str]] | None:
        """Cancel a running chain: (its step, the compensations to run), or None."""
        reply = await self._scripts["cancel"](keys=keys.all, args=[now_ms])
        if reply[0] != 1:
            return None
        return int(reply[1]), [text(c) for c in reply[2:]]

    async def state(self, keys: ChainKeys) -> ChainState:
        """The chain's state alone."""
        state = await self._client.hget(keys.record, "state")
        return ChainState(text(state)) if state is not None else ChainState.MISSING

    async def status(self, keys: ChainKeys) -> ChainStatus:
        """Read the record."""
        raw = await self._client.hgetall(keys.record)
        record = {text(k): text(v) for k, v in raw.items()}
        if not record:
            return ChainStatus(chain_id=keys.chain_id, state=ChainState.MISSING)
        return ChainStatus(
            chain_id=keys.chain_id,
            state=ChainState(record["state"]),
            step=int(record["step"]),
            steps=int(record["steps"]),
            step_names=_names(record["names"]),
            started=from_millis(int(record["started"])),
            updated=from_millis(int(record["updated"])),
            failed_step=int(record["failed_step"]) if "failed_step" in record else None,
            error=record.get("error"),
        )

    async def guard(self, keys: ChainKeys, step: int) -> bool:
        """True when step ``step`` may run: the chain is running and at that step."""
        state, current = await self._client.hmget(keys.record, ["state", "step"])
        if state is None:
            return True  # no record (expired): run rather than lose the work
        return text(state) == ChainState.RUNNING.value and int(text(current)) <= step

    async def pending(self, keys: ChainKeys) -> str | None:
        """The kick of the step the chain is at, as recorded when it was made."""
        raw = await self._client.hget(keys.record, "pending")
        return text(raw) if raw is not None else None


def _names(raw: str) -> list[str]:
    return [str(name) for name in json.loads(raw)]
