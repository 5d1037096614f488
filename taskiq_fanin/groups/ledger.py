"""A group's ledger in chunks: members checked, serialized and read back in chunks.

No script the planner runs, and none of its memory, grows with the group.

A chunk closes at ``CHUNK_MEMBERS`` members or ``CHUNK_BYTES`` bytes of ledger
entries, whichever comes first: one ``createGroup`` or ``appendLedger`` call
each, a millisecond or so of Redis's time.
"""

import hashlib
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass

from taskiq_fanin.context import FanInContext
from taskiq_fanin.domain.signature import Signature
from taskiq_fanin.domain.spec import ChainSpec, member_from_ledger
from taskiq_fanin.groups.group_validation import GroupPlan, checked_member
from taskiq_fanin.storage.keys import GroupKeys

#: The most members one ledger chunk holds.
CHUNK_MEMBERS = 1_000
#: The most bytes of ledger entries one chunk holds (one member may exceed it).
CHUNK_BYTES = 256 * 1024

Member = Signature | ChainSpec


@dataclass(frozen=True)
class Chunk:
    """Members ``first`` to ``first + len(entries) - 1``, checked and serialized."""

    first: int
    members: tuple[Member, ...]
    entries: tuple[str, ...]
    #: No chunk follows.
    last: bool


def digest(plan: GroupPlan, first: Chunk) -> str:
    """What the plan's members are, kept in the meta to tell plans of one id apart.

    Planning the id again with the same members (a ``kiq()`` retried) is the
    same plan; with others, it is refused (``createGroup``'s ``OTHER_PLAN``).
    Only a caller's own id has one: a derived id's plan (a ``@group_task``'s
    own, a chain's group step) is the library's, redone as it can be (its
    members' arguments may not serialize the same after a round trip).

    A listed group's every member; a streamed group's first chunk (its later
    ones are not known before the group is created).
    """
    entries = first.entries if plan.stream is not None else plan.ledger
    hashed = hashlib.blake2b(digest_size=16)
    hashed.update(str(len(entries)).encode())
    for entry in entries:
        hashed.update(b"\n")
        hashed.update(entry.encode())
    return hashed.hexdigest()


async def chunks(ctx: FanInContext, plan: GroupPlan) -> AsyncGenerator[Chunk, None]:
    """The plan's members in chunks; a listed group's were checked already.

    A streamed member is checked before its chunk is handed on: a bad one
    raises before that chunk is written (earlier ones may have been: the
    planner then abandons the group, nothing having been kicked). One chunk is
    read ahead, to tell the last one.
    """
    pending: Chunk | None = None
    async for chunk in _chunks(ctx, plan):
        if pending is not None:
            yield pending
        pending = chunk
    if pending is None:
        pending = Chunk(first=0, members=(), entries=(), last=True)
    yield Chunk(pending.first, pending.members, pending.entries, last=True)


class Replay:
    """A streamed plan's chunks, read once, handed again to a planner that retries.

    A retry of planning (``api/retries.py``) starts from the first chunk again
    (``createGroup``, which tells it the group is its own), then writes again
    the chunk it was writing when it failed, then goes on: every chunk before
    that one was written, as the planner asks for the next only then (should
    Redis have lost them, the planner finds the ledger short of them). The
    iterator is read once, and one chunk of it is held. An error it raised
    (the caller's, or a bad member) is kept and raised again at every try:
    ``failure``, never taken for Redis away.
    """

    def __init__(self, ctx: FanInContext, plan: GroupPlan) -> None:
        self._source = chunks(ctx, plan)
        self._first: Chunk | None = None
        self._last: Chunk | None = None
        #: What the iterator raised, if it did.
        self.failure: Exception | None = None

    async def attempt(self) -> AsyncGenerator[Chunk, None]:
        """The chunks for one try of planning."""
        if self._first is None:
            self._first = await self._next()
            if self._first is None:  # chunks() yields one at least
                raise RuntimeError("a plan's chunks ended before their first")
        yield self._first
        if self._last is not None:
            yield self._last
        while (chunk := await self._next()) is not None:
            self._last = chunk
            yield chunk

    async def _next(self) -> Chunk | None:
        """The iterator's next chunk, ``None`` past the last; its error, kept."""
        if self.failure is not None:
            raise self.failure
        try:
            return await anext(self._source)
        except StopAsyncIteration:
            return None
        except Exception as error:
            self.failure = error
            raise

    async def aclose(self) -> None:
        """Planning is over: the iterator is read no further."""
        await self._source.aclose()


async def _chunks(ctx: FanInContext, plan: GroupPlan) -> AsyncIterator[Chunk]:
    if plan.stream is None:
        members, entries = plan.members, plan.ledger
        for first, stop in _bounds(entries):
            yield Chunk(first, members[first:stop], entries[first:stop], last=False)
        return
    taken: list[Member] = []
    written: list[str] = []
    first = size = 0
    async for member in plan.stream:
        entry = checked_member(ctx, member, first + len(taken), depth=plan.depth)
        taken.append(member)
        written.append(entry)
        size += len(entry)
        if len(taken) >= CHUNK_MEMBERS or size >= CHUNK_BYTES:
            yield Chunk(first, tuple(taken), tuple(written), last=False)
            first, taken, written, size = first + len(taken), [], [], 0
    if taken:
        yield Chunk(first, tuple(taken), tuple(written), last=False)


def _bounds(entries: tuple[str, ...]) -> list[tuple[int, int]]:
    """Where a listed ledger is cut into chunks: (first, stop) pairs."""
    bounds, first, size = [], 0, 0
    for index, entry in enumerate(entries):
        size += len(entry)
        if index + 1 - first >= CHUNK_MEMBERS or size >= CHUNK_BYTES:
            bounds.append((first, index + 1))
            first, size = index + 1, 0
    if first < len(entries):
        bounds.append((first, len(entries)))
    return bounds


async def undispatched(
    ctx: FanInContext, keys: GroupKeys, total: int
) -> AsyncIterator[dict[int, Member]]:
    """The ledger's members with no outcome yet, a page at a time."""
    for start in range(0, total, CHUNK_MEMBERS):
        stop = min(start + CHUNK_MEMBERS, total)
        entries = await ctx.scripts.missing_members(keys, start, stop)
        if entries:
            yield {i: member_from_ledger(entry) for i, entry in entries.items()}
