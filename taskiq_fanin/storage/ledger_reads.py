"""Reading a group's ledger back in bounded pages.

Which members of a window of the ledger have no outcome yet: three short
commands per page (``HMGET`` of the ledger, ``SMISMEMBER`` of done and of
failed) in the shared pipeline, so that no command's cost grows with the group
(an ``HKEYS`` or ``SMEMBERS`` of a 100,000-member group stalls Redis for tens
of milliseconds).
"""

import asyncio

from taskiq_fanin.storage.keys import GroupKeys
from taskiq_fanin.storage.records.fields import text
from taskiq_fanin.transport.pipeline import Command, PipelineBatcher

#: Ledger entries one read asks for at most (one short command each).
LEDGER_CHUNK = 500


def _hmget(key: str, fields: list[int]) -> Command:
    return lambda pipe: pipe.hmget(key, fields)


def _smismember(key: str, values: list[int]) -> Command:
    return lambda pipe: pipe.smismember(key, values)


async def missing_members(
    pipeline: PipelineBatcher, keys: GroupKeys, start: int, stop: int
) -> dict[int, str]:
    """Ledger entries of members ``start`` to ``stop - 1`` with no outcome."""
    found: dict[int, str] = {}
    for first in range(start, stop, LEDGER_CHUNK):
        page = list(range(first, min(first + LEDGER_CHUNK, stop)))
        entries, done, failed = await asyncio.gather(
            pipeline(_hmget(keys.plan, page)),
            pipeline(_smismember(keys.done, page)),
            pipeline(_smismember(keys.failed, page)),
        )
        for i, entry, is_done, is_failed in zip(
            page, entries, done, failed, strict=True
        ):
            if entry is not None and not (is_done or is_failed):
                found[i] = text(entry)
    return found
