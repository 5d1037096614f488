"""No-op members, kicked as one library group, as plain tasks, or as the seed's recipe.

The overhead, scale and small_groups benchmarks share it. Each member notes in
the worker's memory when the first of them started and the last one ended (two
clock reads, no Redis, the same on every side); the continuation reads and
clears those notes first thing, beside its own start, and writes them to the
run's record (plain tasks: the ``notes`` task, when asked): the latencies. It
can also measure the group's keys at their peak: when it starts, every outcome
is recorded and nothing is deleted yet.
That costs one SCAN and a MEMORY USAGE per key, once per group.

The recipe is the seed's hand-written fan-in (``002``): each member SADDs its
index into the group's set, and the one that finds the set full and wins a
``SET NX`` kicks the continuation.
"""

from __future__ import annotations

import time
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError
from taskiq import AsyncBroker

from benchmarks.apps.common import App, AppSettings
from taskiq_fanin import GroupResult, Signature, group

#: SCAN page size when measuring the group's keys.
_SCAN_COUNT = 1000

#: When this worker's first member of the current group started and its last
#: one ended (epoch seconds); one worker process runs one group at a time.
_NOTES: dict[str, float] = {}


def member_ran() -> None:
    """Note that a member ran (a no-op's start is its end): for the continuation."""
    now = time.time()
    _NOTES.setdefault("first_start", now)
    _NOTES["last_end"] = now


async def group_memory(settings: AppSettings, group_id: str) -> dict[str, int]:
    """Bytes (MEMORY USAGE of every element) of each of one group's keys, by part.

    Every key of a group is ``<prefix>:{<group id>}:<part>``; the shared index of
    open groups (one entry per group) is left out. Empty on fakeredis, which has
    no MEMORY USAGE.
    """
    client = Redis.from_url(settings.fanin_url)
    found: dict[str, int] = {}
    pattern = f"{settings.fanin_prefix}:{{{group_id}}}:*"
    try:
        async for key in client.scan_iter(match=pattern, count=_SCAN_COUNT):
            part = key.decode().rsplit("}:", 1)[-1]
            found[part] = await client.memory_usage(key, samples=0) or 0
    except ResponseError:
        return {}
    finally:
        await client.aclose()
    return found


def take_notes() -> dict[str, float]:
    """A continuation's first step: now, and the members' notes, cleared."""
    notes = {"then_start": time.time(), **_NOTES}
    _NOTES.clear()
    return notes


async def record(app: App, notes: dict[str, float], group_id: str | None) -> None:
    """Write the notes (and the group's memory at its peak) to the run's record."""
    fields: dict[Any, Any] = dict(notes)
    if group_id is not None:
        parts = await group_memory(app.settings, group_id)
        if parts:
            fields.update({f"bytes:{part}": size for part, size in parts.items()})
            fields.update(bytes=sum(parts.values()), keys=len(parts))
    await app.client.hset(app.settings.record("then"), mapping=fields)


def build(settings: AppSettings, *, burst: bool = False) -> App:
    """Register the members, the continuations and the recipe for ``settings``.

    ``burst``: the client's broker can send kicks as one burst (``App``).
    """
    app = App(settings, burst=burst)

    @app.task("bench.overhead.noop")
    async def noop(index: int) -> None:
        member_ran()

    @app.task("bench.overhead.then")
    async def then(result: GroupResult, measure: bool, memory: bool = True) -> None:
        notes = take_notes()
        if measure:
            await record(app, notes, result.group_id if memory else None)

    @app.task("bench.overhead.cpu_mark")
    async def cpu_mark(mark: str) -> None:
        """The worker's CPU seconds so far, by its own clock (/proc has 10 ms ticks)."""
        await app.client.hset(settings.record("cpu"), mark, time.process_time())

    @app.task("bench.overhead.notes")
    async def notes() -> None:
        """Plain tasks have no continuation: this writes their notes when asked."""
        await record(app, take_notes(), None)

    @app.task("bench.overhead.recipe_then")
    async def recipe_then(group: str) -> None:
        await record(app, take_notes(), None)

    @app.task("bench.overhead.recipe_member")
    async def recipe_member(group: str, index: int, total: int) -> None:
        member_ran()
        done = settings.record(f"recipe:{group}:done")
        if await app.client.sadd(done, index) and await app.client.scard(done) == total:
            final = settings.record(f"recipe:{group}:final")
            if await app.client.set(final, 1, nx=True):
                await recipe_then.kiq(group)

    return app


async def kick_group(
    app: App, n: int, *, measure: bool, memory: bool = True, **options: Any
) -> tuple[str, float, float]:
    """Plan a group of ``n`` no-op members: its id, when, and ``kiq``'s seconds.

    ``measure``: the continuation writes the notes (``memory``: and the
    group's keys' sizes, a SCAN and a MEMORY USAGE per key).
    """
    members = [Signature.of(app.noop, index) for index in range(n)]
    then = Signature.of(app.then, measure, memory)
    planned = group(members, then=then, **options)
    kicked, began = time.time(), time.perf_counter()
    handle = await planned.kiq(app.broker)
    return handle.group_id, kicked, time.perf_counter() - began


def worker_broker() -> AsyncBroker:
    """Broker factory for ``taskiq worker`` (settings from the environment)."""
    return build(AppSettings.from_env()).broker
