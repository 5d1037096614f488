"""The scripts of a chain's workflow record, one typed method each, and its reads.

Every transition is one script on the record's own slot.
"""

from taskiq_fanin.store.keys import ChainKeys
from taskiq_fanin.store.replies import Advanced
from taskiq_fanin.store.scripts import CHAIN_SCRIPT_FILES, RedisClient, register, text


class ChainScripts:
    """The chain scripts registered on one client."""

    def __init__(self, client: RedisClient) -> None:
        self._client = client
        self._scripts = register(client, CHAIN_SCRIPT_FILES)

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
        args: list[str | int] = [token, now_ms, steps, names, ttl_ms, pending]
        return bool(await self._scripts["start"](keys=keys.all, args=args))

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
        args: list[str | int] = [token, step, now_ms, compensation, ttl_ms, pending]
        return Advanced(await self._scripts["advance"](keys=keys.all, args=args))

    async def finish(
        self, keys: ChainKeys, *, token: str, step: int, now_ms: int
    ) -> bool:
        """Mark the chain done after its last step; True the first time only."""
        args: list[str | int] = [token, step, now_ms]
        return bool(await self._scripts["finish"](keys=keys.all, args=args))

    async def fail(
        self, keys: ChainKeys, *, token: str, step: int, now_ms: int, error: str
    ) -> list[str] | None:
        """Stop the chain at ``step``; the compensations to run, or None if not now."""
        args: list[str | int] = [token, step, now_ms, error]
        reply = await self._scripts["fail"](keys=keys.all, args=args)
        return [text(c) for c in reply[1:]] if reply[0] == 1 else None

    async def cancel(
        self, keys: ChainKeys, *, now_ms: int
    ) -> tuple[int, list[str]] | None:
        """Cancel a running chain: (its step, the compensations to run), or None."""
        reply = await self._scripts["cancel"](keys=keys.all, args=[now_ms])
        if reply[0] != 1:
            return None
        return int(reply[1]), [text(c) for c in reply[2:]]

    async def read(self, keys: ChainKeys) -> dict[str, str]:
        """The whole record ({} when the chain is missing)."""
        raw = await self._client.hgetall(keys.record)
        return {text(k): text(v) for k, v in raw.items()}

    async def read_fields(self, keys: ChainKeys, *fields: str) -> list[str | None]:
        """Some fields of the record (``None`` where missing)."""
        values = await self._client.hmget(keys.record, list(fields))
        return [text(value) if value is not None else None for value in values]
