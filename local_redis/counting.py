"""Counting the commands a run costs: INFO commandstats, and MONITOR.

INFO commandstats counts, per command, what a server executed: script calls and
the commands run inside them alike. MONITOR shows every command a server runs,
in order: commands sent by clients with the client's address, and commands run
inside a script with the source ``lua``. So one untimed pass with a
:class:`MonitorTap` separates round trips (client commands; a script call is
one) from commands executed inside Redis (both); commandstats is the check.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import uuid
from collections import Counter
from dataclasses import dataclass, field
from itertools import islice
from types import TracebackType
from urllib.parse import unquote, urlsplit

from redis.asyncio import Redis

#: A counting run's own probes: never part of what a run costs.
PROBES = frozenset({
    "CLIENT", "COMMAND", "ECHO", "HELLO", "INFO", "MEMORY", "MONITOR", "PING",
    "SCAN", "SCRIPT", "SELECT", "XINFO", "XLEN",
})  # fmt: skip

#: The worker's stream polling: once per fetched batch, not once per task, and
#: how often it runs depends on timing. Reported apart from the per-task counts.
POLLING = frozenset({"XREADGROUP", "XAUTOCLAIM"})

#: taskiq-redis guards XAUTOCLAIM with a redis-py lock under this key prefix.
POLLING_KEY_PREFIX = "autoclaim:"

_EVAL = frozenset({"EVAL", "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO"})


@dataclass
class Tally:
    """What one server ran while the tap was attached, by kind."""

    #: Sent by clients (round trips), per command name; polling excluded.
    client: Counter[str] = field(default_factory=Counter)
    #: Run inside scripts, per command name; polling excluded.
    lua: Counter[str] = field(default_factory=Counter)
    #: Stream polling, client and script alike.
    polling: Counter[str] = field(default_factory=Counter)
    #: Of ``client`` and ``lua``: those on the fan-in's keys.
    fanin_client: int = 0
    fanin_lua: int = 0
    #: Calls INFO commandstats counted meanwhile (probes excluded), if read.
    commandstats: int = 0

    def __add__(self, other: Tally) -> Tally:
        return Tally(
            client=self.client + other.client,
            lua=self.lua + other.lua,
            polling=self.polling + other.polling,
            fanin_client=self.fanin_client + other.fanin_client,
            fanin_lua=self.fanin_lua + other.fanin_lua,
        )

    @property
    def round_trips(self) -> int:
        """Commands clients sent (a script call is one), polling excluded."""
        return sum(self.client.values())

    @property
    def executed(self) -> int:
        """Commands Redis ran (script calls and what they ran), polling excluded."""
        return self.round_trips + sum(self.lua.values())

    def add(self, source: str, words: list[str], fanin_prefix: str) -> bool:
        """Classify one MONITOR line (split into words); True if it is polling."""
        name = words[0].upper()
        if name in PROBES:
            return False
        keys = _keys(name, words)
        if name in POLLING or any(k.startswith(POLLING_KEY_PREFIX) for k in keys):
            self.polling[name] += 1
            return True
        fanin = any(k.startswith(fanin_prefix) for k in keys)
        if source == "lua":
            self.lua[name] += 1
            self.fanin_lua += fanin
        else:
            self.client[name] += 1
            self.fanin_client += fanin
        return False

    def add_transaction(self, polling: bool, fanin: bool) -> None:
        """Count a MULTI and its EXEC with what they wrapped."""
        if polling:
            self.polling.update(("MULTI", "EXEC"))
        else:
            self.client.update(("MULTI", "EXEC"))
            self.fanin_client += 2 * fanin


def _keys(name: str, words: list[str]) -> list[str]:
    """The keys a command names (enough of them to classify it)."""
    if name in _EVAL and len(words) > 2 and words[2].isdigit():
        return words[3 : 3 + int(words[2])]
    return words[1:2]


#: One MONITOR line: ``+<time> [<db> <address or "lua">] "CMD" "arg" ...``.
_LINE = re.compile(r"\+\d+\.\d+ \[\d+ ([^\]]+)\] (.*)")
#: One quoted argument (MONITOR escapes quotes and backslashes inside).
_ARG = re.compile(r'"((?:[^"\\]|\\.)*)"')
#: Arguments a line is classified by: name, sha, numkeys and a few keys.
_ARGS_READ = 12
#: A group's planning sends its whole ledger in one command: one long line.
_LINE_LIMIT = 1 << 28


class MonitorTap:
    """Attach MONITOR to one server; :meth:`stop` returns what it ran meanwhile.

    MONITOR is read over a plain socket rather than redis-py's ``monitor()``,
    whose reader refuses lines over 64 KiB (a big group's planning is one line).
    The end is exact, not timed: the tap sends an ECHO with a fresh token and
    reads until MONITOR shows it, so nothing the run sent is still in flight.
    """

    def __init__(self, url: str, fanin_prefix: str) -> None:
        self.url = url
        self.fanin_prefix = fanin_prefix
        self.tally = Tally()
        self._token = f"bench-monitor-end-{uuid.uuid4().hex}"
        self._writer: asyncio.StreamWriter | None = None
        self._reader: asyncio.Task[None] | None = None
        # Per client: (inside MULTI it wrapped polling, it wrapped fan-in keys).
        self._open: dict[str, tuple[bool, bool]] = {}

    async def __aenter__(self) -> MonitorTap:
        where = urlsplit(self.url)
        reader, self._writer = await asyncio.open_connection(
            where.hostname or "127.0.0.1", where.port or 6379, limit=_LINE_LIMIT
        )
        if where.password:
            auth = (
                [where.username, where.password] if where.username else [where.password]
            )
            await self._send("AUTH", *(unquote(part) for part in auth))
            await reader.readline()
        await self._send("MONITOR")
        reply = await reader.readline()
        if not reply.startswith(b"+OK"):
            msg = f"MONITOR refused: {reply!r}"
            raise RuntimeError(msg)
        self._reader = asyncio.create_task(self._read(reader))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._reader is not None and not self._reader.done():
            self._reader.cancel()
            # wait() rather than awaiting the task: a cancellation of our own
            # caller must propagate, not be taken for the reader's.
            await asyncio.wait({self._reader})
        if self._writer is not None:
            self._writer.close()
            with contextlib.suppress(OSError):
                await self._writer.wait_closed()

    async def stop(self, timeout: float = 300.0) -> Tally:
        """Mark the end, read up to it, and return the tally."""
        client = Redis.from_url(self.url)
        try:
            await client.echo(self._token)
        finally:
            await client.aclose()
        assert self._reader is not None
        await asyncio.wait_for(self._reader, timeout)
        return self.tally

    async def _send(self, *words: str) -> None:
        assert self._writer is not None
        parts = [f"*{len(words)}\r\n".encode()]
        for word in words:
            data = word.encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
        self._writer.write(b"".join(parts))
        await self._writer.drain()

    async def _read(self, reader: asyncio.StreamReader) -> None:
        while True:
            line = await reader.readline()
            if not line:
                msg = "MONITOR connection closed before the end mark"
                raise ConnectionError(msg)
            match = _LINE.match(line.decode("utf-8", "replace").rstrip("\r\n"))
            if match is None:
                continue
            client, rest = match.groups()
            words = [m.group(1) for m in islice(_ARG.finditer(rest), _ARGS_READ)]
            if words == ["ECHO", self._token]:
                return
            if words:
                self._classify(client, words)

    def _classify(self, client: str, words: list[str]) -> None:
        # MONITOR shows a transaction as MULTI, its commands, EXEC (per client):
        # a MULTI/EXEC counts as polling when it wraps polling (taskiq-redis's
        # XAUTOCLAIM), as the fan-in's when it wraps fan-in commands.
        source = "lua" if client == "lua" else "client"
        name = words[0].upper()
        if name == "MULTI" and source == "client":
            self._open[client] = (False, False)
        elif name in {"EXEC", "DISCARD"} and client in self._open:
            self.tally.add_transaction(*self._open.pop(client))
        else:
            polling = self.tally.add(source, words, self.fanin_prefix)
            if client in self._open:
                was_polling, was_fanin = self._open[client]
                keys = _keys(name, words)
                fanin = any(k.startswith(self.fanin_prefix) for k in keys)
                self._open[client] = (was_polling or polling, was_fanin or fanin)


async def commandstats(client: Redis) -> Counter[str]:
    """Calls per command as INFO commandstats counts them.

    Named as Redis names them: ``evalsha``, ``client|setinfo`` (a subcommand
    after a bar).
    """
    stats: dict[str, dict[str, object]] = await client.info("commandstats")
    return Counter(
        {
            name.removeprefix("cmdstat_"): int(str(value["calls"]))
            for name, value in stats.items()
        }
    )


async def commandstats_calls(url: str) -> int:
    """Calls counted by INFO commandstats, the probes (:data:`PROBES`) excluded."""
    client = Redis.from_url(url)
    try:
        counts = await commandstats(client)
    finally:
        await client.aclose()
    return sum(
        calls
        for name, calls in counts.items()
        if name.split("|")[0].upper() not in PROBES
    )
