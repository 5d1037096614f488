"""Reading a group's outcome stream (written by ``recordOutcome``).

Each entry is one member's outcome: ``i`` (its index), ``o`` (done, failed or
skipped), ``n`` (the group's outcomes so far, this one included) and ``p``
(its result, error or reason as JSON, left out when it has none; over 1 KiB,
``c`` says it was cut instead). Its id, on Redis's clock, is the reader's
cursor. Every read here is bounded: a page after a cursor, or the three
entries a pace is counted from.
"""

import re
from dataclasses import dataclass
from typing import Any

from taskiq_fanin.domain.exceptions import InvalidOptionError, shown
from taskiq_fanin.transport.client import RedisClient

#: Where a reader that starts from the beginning starts: before every entry.
START = "0-0"
_CURSOR = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")
#: A stream id's parts are unsigned 64-bit numbers.
_ID_PART_MAX = 2**64 - 1


@dataclass(frozen=True)
class StreamEntry:
    """One recorded outcome, as the stream holds it."""

    cursor: str
    #: When it was recorded (epoch ms, Redis's clock): the id's first part.
    at_ms: int
    index: int
    outcome: str
    #: JSON, or ``""`` when the member left none (or it was cut).
    payload: str
    #: Its payload was larger than the stream keeps (``recordOutcome``'s
    #: ``STREAM_PAYLOAD``, 1 KiB): the group's result holds it.
    cut: bool = False
    #: The group's outcomes recorded so far, this one included (``None``: an
    #: entry written before the stream counted them).
    ordinal: int | None = None


@dataclass(frozen=True)
class PaceMarks:
    """The entries a pace is counted between (``None``: the stream has none)."""

    #: The newest entry recorded at or before the look-back's start.
    before: StreamEntry | None
    #: The oldest entry the stream still keeps, and its newest.
    oldest: StreamEntry | None
    newest: StreamEntry | None


def checked_cursor(cursor: str | None) -> str:
    """A reader's ``after=``: a cursor an outcome gave, or ``None`` (the start)."""
    if cursor is None:
        return START
    if not isinstance(cursor, str) or not _is_stream_id(cursor):
        raise InvalidOptionError(
            name="after",
            value=shown(cursor),
            reason="a cursor an outcome gave (its .cursor), or None for the start",
        )
    return cursor


def _is_stream_id(cursor: str) -> bool:
    """``<ms>-<seq>`` as Redis writes it, with an id after it (``_next``)."""
    if not _CURSOR.fullmatch(cursor):
        return False
    millis, _, sequence = cursor.partition("-")
    return int(millis) <= _ID_PART_MAX and int(sequence) < _ID_PART_MAX


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _entry(entry_id: Any, fields: dict[Any, Any]) -> StreamEntry:
    cursor = _text(entry_id)
    values = {_text(k): _text(v) for k, v in fields.items()}
    return StreamEntry(
        cursor=cursor,
        at_ms=int(cursor.partition("-")[0]),
        index=int(values["i"]),
        outcome=values["o"],
        payload=values.get("p", ""),
        cut=values.get("c") == "1",
        ordinal=int(values["n"]) if "n" in values else None,
    )


def _next(cursor: str) -> str:
    """The first id after ``cursor`` (XRANGE's start is inclusive)."""
    millis, _, sequence = cursor.partition("-")
    return f"{millis}-{int(sequence) + 1}"


async def read_after(
    client: RedisClient, key: str, cursor: str, *, count: int
) -> list[StreamEntry]:
    """At most ``count`` entries after ``cursor``, oldest first; at once."""
    # redis-py's reply types are loose: a list of (id, fields) here.
    found: Any = await client.xrange(key, min=_next(cursor), max="+", count=count)
    return [_entry(entry_id, fields) for entry_id, fields in found]


async def wait_after(
    client: RedisClient, key: str, cursor: str, *, count: int, block_ms: int
) -> list[StreamEntry]:
    """Entries after ``cursor``, waiting up to ``block_ms`` for the first one.

    The wait holds one of the client's connections.
    """
    found: Any = await client.xread({key: cursor}, count=count, block=block_ms)
    if not found:
        return []
    ((_, entries),) = found  # one stream asked, one answered
    return [_entry(entry_id, fields) for entry_id, fields in entries]


async def pace_marks(client: RedisClient, key: str, *, since_ms: int) -> PaceMarks:
    """The three entries a pace is counted between, in one round trip.

    ``since_ms``: the look-back's start (epoch ms, Redis's clock).
    """
    async with client.pipeline(transaction=False) as pipe:
        pipe.xrevrange(key, max=str(since_ms), min="-", count=1)
        pipe.xrange(key, min="-", max="+", count=1)
        pipe.xrevrange(key, max="+", min="-", count=1)
        found: list[Any] = await pipe.execute()
    before, oldest, newest = (
        _entry(*entries[0]) if entries else None for entries in found
    )
    return PaceMarks(before=before, oldest=oldest, newest=newest)
