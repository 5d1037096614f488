"""Commands issued together share one pipeline.

redis-py spends far more CPU on a command sent alone than on the same command
inside a pipeline, and a busy worker or a planner issues many at once: member
completions that finish together, the kicks of a group's members. So while one
pipeline is on its way, the commands issued meanwhile wait and go together in
the next (without MULTI: each command stays what it was, a script call stays its
own atomic script). A command goes at the next turn of the event loop, with
whatever was issued meanwhile. The outcomes of one group's members go together
as one script call (``outcome_batching``). A command someone waits on while the
loop is busy (a continuation's kick, its run guard) goes
:meth:`~PipelineBatcher.now`: from its caller, alone, not turns later. Under
``durability="replicated"`` a pipeline that carries writes ends with ``WAIT``
(``replication``), either way.
"""

import asyncio
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

from redis.asyncio import Redis, RedisCluster
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from taskiq_fanin.transport.replication import Replication, Waits

T = TypeVar("T")

#: The most commands one pipeline carries.
MAX_BATCH = 256
#: Adds one command to a pipeline (whatever redis-py pipeline method fits).
Command = Callable[[Any], object]
#: A command, its caller's reply, and the key it writes (``None``: a read).
_Pending = tuple[Command, "asyncio.Future[Any]", Any]


@dataclass
class PipelineStats:
    """What was sent: pipelines (round trips), and the commands they carried."""

    pipelines: int = 0
    commands: int = 0


class PipelineBatcher:
    """Sends commands in pipelines; those issued while one is out wait for the next.

    :param gather_seconds: how long a batch waits for more commands before it
        goes; 0 still collects every command issued in the same loop turn.
    :param replication: writes count as done once replicated (``WAIT``).
    """

    def __init__(
        self,
        client: Redis | RedisCluster,
        *,
        gather_seconds: float = 0.0,
        replication: Replication | None = None,
    ) -> None:
        self._client = client
        self._replication = replication
        self._gather_seconds = gather_seconds
        self._pending: list[_Pending] = []
        self._sender: asyncio.Task[None] | None = None
        self.stats = PipelineStats()

    async def __call__(self, command: Command, *, written: Any = None) -> Any:
        """Send ``command`` (``lambda pipe: pipe.xadd(...)``); returns its reply.

        A command Redis refused raises its error here, for this caller only.
        ``written``: a key the command writes (a script's first), for a write
        that must be replicated to count as done.
        """
        loop = asyncio.get_running_loop()
        reply: asyncio.Future[Any] = loop.create_future()
        self._pending.append((command, reply, written))
        if self._sender is None or self._sender.done():
            self._sender = loop.create_task(self._send_while_pending())
        return await reply

    async def now(self, command: Command, *, written: Any = None) -> Any:
        """Send ``command`` at once, alone, from the caller; returns its reply.

        A batch is written two loop turns later (its sender's task, its wait for
        company), and on a busy loop each turn first runs every task ready
        before it; this goes from the caller's own step (redis-py's write under
        a socket timeout takes one turn on Python < 3.12). One round trip that
        nothing shares: for a command per group or workflow, not per member.
        ``written``: as for a batched command.
        """
        self.stats.pipelines += 1
        self.stats.commands += 1
        async with self._client.pipeline(transaction=False) as pipe:
            command(pipe)
            waits = self._follow(pipe, [] if written is None else [written])
            reply, *waited = await pipe.execute(raise_on_error=False)
        if waits is not None:
            waits.heard(self._client, waited)
            reply = _replicated(reply, waits.failure(self._client, written))
        if isinstance(reply, Exception):
            raise reply
        return reply

    def _follow(self, pipe: Any, written: Sequence[Any]) -> Waits | None:
        """The WAITs that follow the writes of ``pipe``, if they must be replicated."""
        if self._replication is None or not written:
            return None
        return self._replication.follow(self._client, pipe, written)

    async def _send_while_pending(self) -> None:
        while self._pending:
            await asyncio.sleep(self._gather_seconds)
            batch = self._pending[:MAX_BATCH]
            del self._pending[:MAX_BATCH]
            await self._send(batch)

    async def _send(self, batch: list[_Pending]) -> None:
        self.stats.pipelines += 1
        self.stats.commands += len(batch)
        try:
            written = [key for _, _, key in batch if key is not None]
            async with self._client.pipeline(transaction=False) as pipe:
                for command, _, _ in batch:
                    command(pipe)
                waits = self._follow(pipe, written)
                replies = await pipe.execute(raise_on_error=False)
            if waits is not None:
                waits.heard(self._client, replies[len(batch) :])
            own = replies[: len(batch)]
            for (_, reply, key), answer in zip(batch, own, strict=True):
                if reply.done():
                    continue  # its caller was cancelled
                outcome = answer
                if waits is not None and key is not None:
                    outcome = _replicated(answer, waits.failure(self._client, key))
                if isinstance(outcome, Exception):
                    reply.set_exception(outcome)
                else:
                    reply.set_result(outcome)
        except BaseException as exc:
            # Every caller hears of it, the sender's own cancellation included:
            # a future left pending would hold its member's slot for good.
            fail_all(batch, exc)
            if not isinstance(exc, Exception):
                raise


def _replicated(answer: Any, failure: Exception | None) -> Any:
    """A write's reply, unless its replicas missed it: then as if unanswered.

    A command Redis refused keeps its own error (a script not loaded yet:
    ``NOSCRIPT``, which loads it; a replica's absence would hide it).
    """
    if failure is None or isinstance(answer, Exception):
        return answer
    return failure


def fail_all(calls: Sequence[tuple[Any, ...]], exc: BaseException) -> None:
    """Every caller still waiting hears of ``exc`` (a cancellation, as one)."""
    for _, reply, *_ in calls:
        if not reply.done():
            if isinstance(exc, asyncio.CancelledError):
                reply.cancel()
            else:
                reply.set_exception(exc)


class ScriptBatcher:
    """Calls one registered script through a shared :class:`PipelineBatcher`.

    Every call is still exactly one EVALSHA inside Redis.
    """

    def __init__(
        self, batcher: PipelineBatcher, script: AsyncScript, *, writes: bool = True
    ) -> None:
        self._script = script
        self._batcher = batcher
        #: The script writes: under replicated durability it waits for replicas.
        self._writes = writes

    @property
    def script(self) -> AsyncScript:
        """The script as redis-py registered it."""
        return self._script

    async def __call__(
        self, keys: Sequence[Any] = (), args: Sequence[Any] = (), *, now: bool = False
    ) -> Any:
        """Run the script with ``keys`` and ``args``; returns its reply.

        ``now``: sent at once, alone (:meth:`PipelineBatcher.now`).
        """
        command = ("EVALSHA", self._script.sha, len(keys), *keys, *args)
        written = keys[0] if self._writes and keys else None
        send = self._batcher.now if now else self._batcher
        # Through the pipeline after a load too, so that a write is still
        # followed by WAIT.
        return await loaded(
            self._script,
            lambda: send(lambda pipe: pipe.execute_command(*command), written=written),
        )


#: How many loads a call that keeps meeting NOSCRIPT asks for before it raises.
RELOADS = 3


async def loaded(script: AsyncScript, call: Callable[[], Awaitable[T]]) -> T:
    """``call()``; NOSCRIPT (the server lost its script cache): load, call again.

    The first load is shared with the callers at the same time; one that
    began before this caller's NOSCRIPT may have landed before the cache was
    lost again (a replica promoted once more, a Cluster primary the load did
    not reach): a NOSCRIPT again starts a load of this caller's own. Bounded.
    """
    shared = True
    for _ in range(RELOADS):
        try:
            return await call()
        except NoScriptError:
            await reload(script, shared=shared)
            shared = False
    return await call()


#: The load under way of each script, which callers at the same time share: per
#: event loop (a task left pending on a closed loop must block no later one).
_Loads: TypeAlias = "weakref.WeakKeyDictionary[AsyncScript, asyncio.Task[Any]]"
_RELOADING: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Loads]" = (
    weakref.WeakKeyDictionary()
)


async def reload(script: AsyncScript, *, shared: bool = True) -> None:
    """Load ``script`` again into a server that lost its script cache.

    Callers at the same time share one load: a fresh Cluster, or a replica just
    promoted (scripts are not replicated), answers every first call NOSCRIPT,
    and a load per caller, each to every primary on a connection of its own,
    ran past the client's connections per node (``MaxConnectionsError``).
    ``shared=False``: a load of the caller's own (the shared one did not do).
    """
    if not shared:
        await script.registered_client.script_load(script.script)
        return
    of_loop = _RELOADING.setdefault(
        asyncio.get_running_loop(), weakref.WeakKeyDictionary()
    )
    loading = of_loop.get(script)
    if loading is None or loading.done():
        loading = asyncio.ensure_future(
            script.registered_client.script_load(script.script)
        )
        of_loop[script] = loading
        loading.add_done_callback(lambda done: _forget(of_loop, script, done))
    await asyncio.shield(loading)  # a caller cancelled leaves it to the others


def _forget(of_loop: _Loads, script: AsyncScript, done: "asyncio.Task[Any]") -> None:
    if of_loop.get(script) is done:
        del of_loop[script]
    if not done.cancelled():
        done.exception()  # heard by its callers: not "never retrieved"
