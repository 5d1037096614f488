"""The stored records, typed: a group's meta and a chain's workflow record.

One class per Redis hash, as arq keeps a job's hash in one ``JobDef``: this
package (and the Lua scripts) alone know the hash's field names; everything else
reads the record's attributes, named as the options they hold (the stored
``span`` is ``deadline_ms``, ``sweep`` is ``sweep_policy``). ``tests/test_records.py``
keeps it so (it walks every other module for a field name used as a key).

Times are epoch ms on Redis's clock (``*_at``, ``run_until``); durations are ms
(``*_ms``). A field a record lacks (one written before the field was kept, or a
hash that is gone) reads as its default: a missing hash reads as state
``missing``. Ledger entries and errors are kept as stored and parsed when asked
for, so that the sweep's judgement of a record parses no JSON it does not use.
"""

from collections.abc import Callable
from typing import Any, TypeVar

from taskiq_fanin.storage.records.chain_record import ChainRecord
from taskiq_fanin.storage.records.fields import FAILURE_PREFIX, as_text, text
from taskiq_fanin.storage.records.group_meta import META_FIELDS, GroupMeta, meta_options
from taskiq_fanin.transport.client import RedisClient

__all__ = [
    "FAILURE_PREFIX",
    "META_FIELDS",
    "STORED_FIELDS",
    "ChainRecord",
    "GroupMeta",
    "as_text",
    "meta_options",
    "read_fields",
    "read_indexed",
]

Record = TypeVar("Record", GroupMeta, ChainRecord)


async def read_fields(
    client: RedisClient, key: str, record: type[Record], *names: str
) -> Record:
    """Only these fields of a record (by attribute name): one ``HGET`` or ``HMGET``."""
    stored = [record.STORED[name] for name in names]
    if len(stored) == 1:
        values: list[Any] = [await client.hget(key, stored[0])]
    else:
        values = await client.hmget(key, stored)
    found = {
        name: value
        for name, value in zip(stored, values, strict=True)
        if value is not None
    }
    return record.from_hash(found)


async def read_indexed(
    client: RedisClient,
    index: str,
    limit: int,
    key_of: Callable[[str], str],
    record: type[Record],
    *,
    start: int = 0,
) -> list[tuple[str, Record]]:
    """``limit`` ids of a sweep index from ``start``, soonest due first, with records.

    ``key_of(id)`` names each id's hash: one read of the index, one pipeline.
    """
    ids = [text(raw) for raw in await client.zrange(index, start, start + limit - 1)]
    async with client.pipeline(transaction=False) as pipe:
        for found_id in ids:
            pipe.hgetall(key_of(found_id))
        hashes = await pipe.execute()
    return [
        (found_id, record.from_hash(raw))
        for found_id, raw in zip(ids, hashes, strict=True)
    ]


#: Every field name a group's meta or a chain's record is stored under (and the
#: prefix of a chain's ``failure:<step>``): what no module outside this package may
#: use as a key (``tests/test_records.py``).
STORED_FIELDS = frozenset(
    {*GroupMeta.STORED.values(), *ChainRecord.STORED.values(), FAILURE_PREFIX}
)
