"""Member completions that finish together share one round trip.

A busy worker finishes many members at once, and redis-py spends far more CPU on
a command sent alone than on the same command inside a pipeline. So while one
pipeline of a script's calls is on its way, the calls made meanwhile wait and go
together in the next (without MULTI: each call stays its own atomic script). An
idle worker sends each call at once; a busy one sends fewer, larger pipelines.
Every completion is still exactly one EVALSHA inside Redis.
"""

import asyncio
from collections.abc import Sequence
from typing import Any

from redis.asyncio import Redis, RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

#: The most calls one pipeline carries.
MAX_BATCH = 256
#: How long a batch waits for more calls before it goes: a millisecond more on
#: one completion buys a busy worker pipelines several times larger.
GATHER_SECONDS = 0.001

_Call = tuple[Sequence[Any], Sequence[Any], "asyncio.Future[Any]"]


class ScriptBatcher:
    """Calls one registered script; calls made while a batch is out wait for it."""

    def __init__(self, client: Redis | RedisCluster, script: AsyncScript) -> None:
        self._client = client
        self._script = script
        self._pending: list[_Call] = []
        self._sender: asyncio.Task[None] | None = None

    async def __call__(self, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        """Run the script with ``keys`` and ``args``; returns its reply."""
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[Any] = loop.create_future()
        self._pending.append((keys, args, reply))
        if self._sender is None or self._sender.done():
            self._sender = loop.create_task(self._send_while_pending())
        return await reply

    async def _send_while_pending(self) -> None:
        while self._pending:
            await asyncio.sleep(GATHER_SECONDS)
            batch = self._pending[:MAX_BATCH]
            del self._pending[:MAX_BATCH]
            await self._send(batch)

    async def _send(self, batch: list[_Call]) -> None:
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                for keys, args, _ in batch:
                    pipe.execute_command(
                        "EVALSHA", self._script.sha, len(keys), *keys, *args
                    )
                replies = await pipe.execute(raise_on_error=False)
        except Exception as exc:  # noqa: BLE001 - every caller gets the error
            for _, _, reply in batch:
                if not reply.done():
                    reply.set_exception(exc)
            return
        for (keys, args, reply), outcome in zip(batch, replies, strict=True):
            if reply.done():
                continue
            if isinstance(outcome, NoScriptError):
                # The server lost its script cache: the script object reloads it.
                await self._retry_alone(keys, args, reply)
            elif isinstance(outcome, Exception):
                reply.set_exception(outcome)
            else:
                reply.set_result(outcome)

    async def _retry_alone(
        self, keys: Sequence[Any], args: Sequence[Any], reply: "asyncio.Future[Any]"
    ) -> None:
        try:
            outcome = await self._script(keys=keys, args=args)
        except Exception as exc:  # noqa: BLE001 - handed to the caller
            if not reply.done():
                reply.set_exception(exc)
            return
        if not reply.done():
            reply.set_result(outcome)
