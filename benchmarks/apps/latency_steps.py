"""No-op members and their continuation, as a library group and as the seed's recipe.

``benchmarks.latency_steps`` runs one worker of this app per side. The worker
(never the benchmark's own process, and never the library's code) wraps, for
its side, what a member's outcome and the continuation pass through, and notes
when each step begins: ``time.perf_counter_ns()`` in the worker, which runs
both the members and the continuation. The notes stay in the worker's memory
until the continuation's body, having noted its start, writes them to the
run's record (``steps``) for the benchmark to read.

Where the notes are taken (library side):

- ``body_end``: the member's body returns (a no-op's start is its end);
- ``post_execute``: ``FanInMiddleware.post_execute`` begins for it;
- ``joined``: its outcome joins the batcher (``OutcomeBatcher.record``);
- ``wait_over``: its call stops waiting for company (``_call_script`` begins);
- ``in_pipeline``: the pipeline's sender adds the call (``_arguments``);
- ``written``: redis-py writes that pipeline (``Pipeline._execute_pipeline``);
- ``reply``: its replies are read; ``returned``: the batcher has the reply;
- ``finalise``: the claimant resumed (``finalise`` begins);
- ``kick_begins``: ``_kick_continuation`` begins (taskiq's kicker, its ``pre_send``);
- ``xadd_sent`` / ``xadd_back``: the kick's ``PipelinedBroker.kick``;
- ``read_back``: the worker's XREADGROUP that returned the continuation
  (``read_issued``: when it was sent);
- ``hooks_begin``: the first middleware's ``pre_execute`` (taskiq's receiver);
- ``guard_begins`` / ``guard_back``: ``GroupScripts.begin_continuation``;
- ``body_start``: the continuation's body starts;
- beside them (the JSON's timelines only): the claimant's rescore of the
  sweep's index and its ``markDispatched``, each sent and back; every XACK.

The recipe (the seed's fan-in, ``002``; as ``apps/overhead.py`` has it) notes
the same where it has the step: ``written`` before its SADD, ``sadd_back``,
``scard_back``, ``reply`` (SET NX's), ``kick_begins`` before its ``kiq``, and
the broker's own ``kick``. Every side's member notes only in memory, in the
same way; the continuation is the only one that writes to Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any

import redis.asyncio
from redis.asyncio.client import Pipeline
from taskiq import AckableMessage, AsyncBroker, TaskiqMessage, TaskiqMiddleware

from benchmarks.apps.common import App, AppSettings
from taskiq_fanin import FanInMiddleware, GroupResult, Signature, group
from taskiq_fanin.groups import finalising, recording
from taskiq_fanin.storage.group_scripts import GroupScripts
from taskiq_fanin.storage.replies import Recorded
from taskiq_fanin.transport.outcome_batching import OutcomeBatcher
from taskiq_fanin.transport.queue_kicks import PipelinedBroker

#: Seconds the continuation waits before it writes its group's notes.
WRITE_AFTER = 0.005

#: A run made with ``new_settings(url, BARE)`` notes nothing but its members'
#: ends and the continuation's start: what the other notes cost, beside them.
BARE = "latency-bare"

NOOP = "bench.latency.noop"
FANIN_THEN = "bench.latency.fanin_then"
RECIPE_MEMBER = "bench.latency.recipe_member"
RECIPE_THEN = "bench.latency.recipe_then"

now = time.perf_counter_ns
#: The worker's CPU time: over the same span, how busy its one loop was.
cpu = time.process_time_ns

#: The current group's notes, by step; one worker runs one group at a time.
STAMPS: dict[str, int] = {}
#: Per member index: its body's end (wall, CPU), its post_execute, its join.
BODY_END: dict[int, int] = {}
BODY_CPU: dict[int, int] = {}
POST_EXECUTE: dict[int, int] = {}
JOINED: dict[int, int] = {}
#: The last XREADGROUP: when it was sent and when it returned.
READ: dict[str, int] = {}
#: When this worker's XACKs were sent (the members' acknowledgements).
ACKS: list[int] = []
#: Notes of outcome calls in a pipeline not yet written, by the call's arguments.
PENDING: dict[tuple[Any, ...], dict[str, int]] = {}


def build(
    settings: AppSettings, *middlewares: TaskiqMiddleware, burst: bool = False
) -> App:
    """Register the members and continuations of both sides for ``settings``."""
    app = App(settings, *middlewares, burst=burst)

    @app.task(NOOP)
    async def noop(index: int) -> None:
        BODY_END[index], BODY_CPU[index] = now(), cpu()

    @app.task(FANIN_THEN)
    async def fanin_then(result: GroupResult) -> None:
        await _write(app, now(), cpu())

    @app.task(RECIPE_THEN)
    async def recipe_then(group: str) -> None:
        await _write(app, now(), cpu())

    @app.task(RECIPE_MEMBER)
    async def recipe_member(group: str, index: int, total: int) -> None:
        mine = {"body_end": now(), "cpu_end": cpu()}
        BODY_END[index] = mine["body_end"]
        done = settings.record(f"recipe:{group}:done")
        mine["written"] = now()
        added = await app.client.sadd(done, index)
        mine["sadd_back"] = now()
        if added and await app.client.scard(done) == total:
            mine["scard_back"] = now()
            final = settings.record(f"recipe:{group}:final")
            if await app.client.set(final, 1, nx=True):
                mine["reply"] = now()
                STAMPS.update(mine, kick_begins=now())
                await recipe_then.kiq(group)

    return app


async def _write(app: App, body_start: int, cpu_start: int) -> None:
    """The continuation's notes, and the members', to the run's record.

    The next group's notes start afresh at once; these are written a moment
    later, so that a kick that hears its XADD's reply only after the body
    started (on a busy loop) still notes it.
    """
    global STAMPS  # wrappers note into the group's own dict
    notes, STAMPS = STAMPS, {}
    ends = list(BODY_END.values())
    if "body_end" not in notes:  # no claimant noted (bare): the last member
        last = max(BODY_END, key=BODY_END.__getitem__)
        notes.update(body_end=BODY_END[last], cpu_end=BODY_CPU[last])
    notes.update(body_start=body_start, cpu_start=cpu_start)
    notes.update(first_body_end=min(ends), last_body_end=max(ends))
    notes.update({f"end{number}": at for number, at in enumerate(sorted(ends))})
    notes.update({f"ack{number}": at for number, at in enumerate(ACKS)})
    for kept in (BODY_END, BODY_CPU, POST_EXECUTE, JOINED, ACKS):
        kept.clear()
    await asyncio.sleep(WRITE_AFTER)
    fields: dict[Any, Any] = notes
    await app.client.hset(app.settings.record("steps"), mapping=fields)


async def kick_library(app: App, n: int) -> None:
    """A library group of ``n`` no-op members (its members kicked in one pipeline)."""
    members = [Signature.of(app.noop, index) for index in range(n)]
    await group(members, then=Signature.of(app.fanin_then)).kiq(app.broker)


async def kick_recipe(app: App, n: int, *, burst: bool) -> None:
    """The recipe's ``n`` members: in one burst, or one after the other (the seed)."""
    gid = f"g{now():x}"
    async with app.broker.burst() if burst else contextlib.nullcontext():  # type: ignore[attr-defined]
        for index in range(n):
            await app.recipe_member.kiq(gid, index, n)


# -- the worker's notes ----------------------------------------------------------


class HooksBegin(TaskiqMiddleware):
    """Notes when taskiq's hooks begin for the continuation (the first middleware)."""

    def __init__(self, task_name: str) -> None:
        super().__init__()
        self.task_name = task_name

    def pre_execute(self, message: TaskiqMessage) -> TaskiqMessage:
        if message.task_name == self.task_name:
            STAMPS["hooks_begin"] = now()
        return message


def _around(owner: Any, name: str, wrap: Callable[[Any], Any]) -> None:
    setattr(owner, name, wrap(getattr(owner, name)))


def _note_reads(broker: AsyncBroker, continuation: str) -> None:
    """When the XREADGROUP that returned the continuation was sent and returned."""

    def xreadgroup(original: Any) -> Any:
        async def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
            READ["issued"] = now()
            fetched = await original(self, *args, **kwargs)
            READ["back"] = now()
            return fetched

        return timed

    def xack(original: Any) -> Any:
        def noted(self: Any, *args: Any, **kwargs: Any) -> Any:
            ACKS.append(now())
            return original(self, *args, **kwargs)

        return noted

    def xautoclaim(original: Any) -> Any:
        def noted(self: Any, *args: Any, **kwargs: Any) -> Any:
            READ["listener_resumed"] = now()  # it looks for stale messages first
            return original(self, *args, **kwargs)

        return noted

    _around(redis.asyncio.Redis, "xreadgroup", xreadgroup)
    _around(redis.asyncio.Redis, "xack", xack)
    _around(Pipeline, "xautoclaim", xautoclaim)
    listen, mark = broker.listen, continuation.encode()

    async def noted() -> AsyncGenerator[bytes | AckableMessage, None]:
        async with contextlib.aclosing(listen()) as messages:
            async for message in messages:
                data = message.data if isinstance(message, AckableMessage) else message
                if mark in data:
                    STAMPS.update(
                        read_issued=READ["issued"],
                        read_back=READ["back"],
                        listener_resumed=READ.get("listener_resumed", 0),
                    )
                yield message

    broker.listen = noted  # type: ignore[method-assign]  # this worker's only


def _note_recipe_kick(broker: AsyncBroker) -> None:
    """The recipe's continuation goes through the broker's own kick."""

    def kick(original: Any) -> Any:
        async def timed(message: Any) -> None:
            notes = STAMPS if message.task_name == RECIPE_THEN else {}
            notes["xadd_sent"] = now()
            await original(message)
            notes["xadd_back"] = now()

        return timed

    _around(broker, "kick", kick)


def _post_execute(original: Any) -> Any:
    """Note when FanInMiddleware.post_execute begins for a member."""

    async def timed(self: Any, message: TaskiqMessage, result: Any) -> None:
        if message.task_name == NOOP:
            POST_EXECUTE[int(message.args[0])] = now()
        await original(self, message, result)

    return timed


def _joins(original: Any) -> Any:
    """Note when a member's outcome joins the outcome batcher."""

    async def timed(self: Any, keys: Any, token: str, head: Any, member: Any) -> Any:
        JOINED[int(member[0])] = now()
        return await original(self, keys, token, head, member)

    return timed


def _call_script(original: Any) -> Any:
    """Note a call's end of waiting and its reply; the claimant's are the group's."""

    async def timed(self: Any, key: Any, call: Any) -> Any:
        notes = call.__dict__.setdefault("bench_notes", {})
        notes["wait_over"] = now()
        reply = await original(self, key, call)
        notes["returned"] = now()
        codes = reply[0]
        if Recorded.CLAIMED in codes:  # the claimant's call: its notes are the group's
            index = int(call.members[codes.index(Recorded.CLAIMED)][0][0])
            STAMPS.update(
                notes,
                body_end=BODY_END[index],
                cpu_end=BODY_CPU[index],
                post_execute=POST_EXECUTE[index],
                joined=JOINED[index],
                call_members=len(call.members),
                call_waited=int(call.waiting),
            )
        return reply

    return timed


def _arguments(original: Any) -> Any:
    """Note when the pipeline's sender adds a call (and find it again when written)."""

    def timed(call: Any) -> Any:
        notes = call.__dict__.setdefault("bench_notes", {})
        notes["in_pipeline"] = now()
        made = original(call)
        PENDING[tuple(made)] = notes
        return made

    return staticmethod(timed)


def _execute_pipeline(original: Any) -> Any:
    """Note when redis-py writes a pipeline with an outcome call, and its replies."""

    async def timed(self: Any, connection: Any, commands: Any, *args: Any) -> Any:
        calls = [
            found
            for command, _ in commands
            if command[0] == "EVALSHA"
            and (found := PENDING.pop(tuple(command[2:]), None)) is not None
        ]
        for notes in calls:
            notes["written"] = now()
        replies = await original(self, connection, commands, *args)
        for notes in calls:
            notes["reply"] = now()
        return replies

    return timed


def _stamped(original: Any, before: str, after: str | None = None) -> Any:
    """Note when ``original`` is called (``before``) and returns (``after``)."""

    async def timed(*args: Any, **kwargs: Any) -> Any:
        notes = STAMPS
        notes[before] = now()
        returned = await original(*args, **kwargs)
        if after is not None:
            notes[after] = now()
        return returned

    return timed


def _kick(original: Any) -> Any:
    """Note the continuation's PipelinedBroker.kick: its XADD sent and back."""

    async def timed(self: Any, message: Any) -> None:
        notes = STAMPS if message.task_name == FANIN_THEN else {}
        notes["xadd_sent"] = now()
        await original(self, message)
        notes["xadd_back"] = now()

    return timed


def _note_library() -> None:
    """Wrap the library's functions on the way from a member's end to the kick."""
    _around(FanInMiddleware, "post_execute", _post_execute)
    _around(OutcomeBatcher, "record", _joins)
    _around(OutcomeBatcher, "_call_script", _call_script)
    _around(OutcomeBatcher, "_arguments", _arguments)
    _around(Pipeline, "_execute_pipeline", _execute_pipeline)
    _around(recording, "finalise", lambda f: _stamped(f, "finalise"))
    _around(finalising, "_kick_continuation", lambda f: _stamped(f, "kick_begins"))
    _around(PipelinedBroker, "kick", _kick)
    # Beside the steps, in the timelines: the claimant's other round trips.
    _around(
        finalising,
        "_rescore_to_lease_end",
        lambda f: _stamped(f, "rescore_sent", "rescore_back"),
    )
    _around(
        GroupScripts,
        "mark_dispatched",
        lambda f: _stamped(f, "dispatch_sent", "dispatch_back"),
    )
    _around(
        GroupScripts,
        "begin_continuation",
        lambda f: _stamped(f, "guard_begins", "guard_back"),
    )


def worker_broker() -> AsyncBroker:
    """Broker factory for ``taskiq worker``: its side's notes wrapped in."""
    settings = AppSettings.from_env()
    if settings.keys.startswith(f"bench-{BARE}-"):
        return build(settings).broker
    library = bool(settings.fanin_url)
    continuation = FANIN_THEN if library else RECIPE_THEN
    app = build(settings, HooksBegin(continuation))
    _note_reads(app.broker, continuation)
    if library:
        _note_library()
    else:
        _note_recipe_kick(app.broker)
    return app.broker
