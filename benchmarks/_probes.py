"""What a Redis server says about a run: its CPU time, and its slowest commands."""

from __future__ import annotations

import functools
import hashlib
import re
from types import TracebackType
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from local_redis.counting import PROBES
from taskiq_fanin.storage.scripts import packaged

#: Commands slower than this (microseconds) are logged while a span runs.
SLOWER_THAN_US = 250
#: Entries the log keeps meanwhile (the newest): a span that fills it may have
#: lost its slowest, and says so.
MAX_ENTRIES = 20_000
#: Commands of the benchmark's own, never what a run costs.
_NOT_THE_RUN = PROBES | {"SLOWLOG", "CONFIG"}


async def redis_cpu(client: Redis) -> float | None:
    """CPU seconds the Redis server has used (``None``: no INFO, as on fakeredis)."""
    try:
        info = await client.info("cpu")
    except ResponseError:
        return None
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def used(before: float | None, after: float | None) -> float | None:
    """What a counter (CPU seconds) gained over a span; ``None`` if unreadable."""
    return None if before is None or after is None else after - before


class SlowLog:
    """The slowest single command one server runs during a span (``SLOWLOG``).

    The log's threshold and length are lowered for the span and put back after,
    so a server named by ``REDIS_URL`` is left as it was; the log is reset at the
    start. ``longest()`` is ``None`` where there is no SLOWLOG (fakeredis).
    """

    def __init__(self, client: Redis) -> None:
        self.client = client
        self._saved: Any = None

    async def __aenter__(self) -> SlowLog:
        try:
            self._saved = await self.client.config_get("slowlog-*")
            await self.client.config_set("slowlog-log-slower-than", SLOWER_THAN_US)
            await self.client.config_set("slowlog-max-len", MAX_ENTRIES)
            await self.client.slowlog_reset()
        except ResponseError:
            self._saved = None
        return self

    async def longest(self) -> dict[str, Any] | None:
        """The slowest command of the span: ``{"ms", "command", "words", ...}``.

        ``words`` is how many the command had (name and arguments): a script
        that records a batch of outcomes has more.
        """
        if self._saved is None:
            return None
        entries = await self.client.slowlog_get(MAX_ENTRIES)
        runs = [
            (entry["duration"] / 1000, *_command(entry["command"]))
            for entry in entries
            if _command(entry["command"])[0].split(" ")[0] not in _NOT_THE_RUN
        ]
        ms, command, words = max(runs, default=(None, None, None))
        return {
            "ms": None if ms is None else round(ms, 3),
            "command": command,
            "words": words,
            "logged": len(runs),
            "full": len(entries) >= MAX_ENTRIES,
        }

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._saved is not None:
            for name, value in self._saved.items():
                await self.client.config_set(name, value)


@functools.cache
def _script_names() -> dict[str, str]:
    """The library's scripts by their SHA1, as EVALSHA names them."""
    return {
        hashlib.sha1(script.source.encode()).hexdigest(): name
        for name, script in packaged().items()
    }


def _command(raw: bytes | str) -> tuple[str, int]:
    """A logged command's name, its script's (``EVALSHA createGroup``), its words.

    SLOWLOG keeps 32 words of a command and says how many more it had.
    """
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else raw
    words = text.split()
    more = re.search(r"\.\.\. \((\d+) more arguments\)$", text)
    count = len(words) if more is None else 31 + int(more[1])
    name = words[0].upper() if words else ""
    if name == "EVALSHA" and len(words) > 1:
        return f"{name} {_script_names().get(words[1], words[1][:8])}", count
    return name, count
