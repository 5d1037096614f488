"""A windowed group's releases: how far its window reaches, what one released.

What one outcome released is ``recordOutcome``'s own part of its reply for a
member. The cursor is not stored: each outcome recorded releases the next
ledger index, so a group's window reaches ``max_in_flight`` past its outcomes
(``GroupMeta.released``), read here from the meta alone, at any size.
"""

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from taskiq_fanin.storage.keys import GroupKeys
from taskiq_fanin.storage.records import GroupMeta
from taskiq_fanin.storage.records.fields import text
from taskiq_fanin.transport.pipeline import Command

#: What a group's window is worked out from.
_WINDOW_FIELDS = [
    GroupMeta.stored_as(name) for name in ("total", "done", "failed", "max_in_flight")
]


@dataclass(frozen=True)
class Released:
    """A member of a windowed group an outcome released: the caller kicks it."""

    index: int
    #: Its ledger row ('' if the ledger has none).
    entry: str
    depth: int
    cancellable: bool


def released_member(part: list[Any] | None) -> Released | None:
    """A member's own part of ``recordOutcome``'s reply: what it released."""
    if not part:
        return None
    index, entry, depth, cancellable = part
    return Released(int(index), text(entry), int(depth), text(cancellable) == "1")


async def released(send: Callable[[Command], Awaitable[Any]], keys: GroupKeys) -> int:
    """How many ledger indexes (from 0) of the group may have been kicked.

    Its whole ledger unless windowed (``max_in_flight``); 0 if it is gone.
    ``send``: a plain command in the shared pipeline (``GroupScripts.send``).
    """
    values = await send(lambda pipe: pipe.hmget(keys.meta, _WINDOW_FIELDS))
    raw = {f: v for f, v in zip(_WINDOW_FIELDS, values, strict=True) if v is not None}
    return GroupMeta.from_hash(raw).released
