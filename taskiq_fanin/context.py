"""What every engine works with, built once when the broker starts.

The middleware creates one :class:`FanInContext` in ``startup`` and hands it to
the engine that owns each event; the public verbs find it through the broker.
Engines receive it as their first argument and never look anything up
elsewhere.
"""

import itertools
import os
import secrets
import socket
import weakref
from collections.abc import Awaitable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

from taskiq import AsyncBroker, AsyncTaskiqDecoratedTask, TaskiqMessage

from taskiq_fanin.domain.config import FanInConfig
from taskiq_fanin.domain.exceptions import MiddlewareNotFoundError
from taskiq_fanin.domain.group_result import running_pages
from taskiq_fanin.domain.labels import MemberRef
from taskiq_fanin.domain.spec import ChainSpec
from taskiq_fanin.storage.chain_scripts import ChainScripts
from taskiq_fanin.storage.group_scripts import GroupScripts
from taskiq_fanin.storage.result_pages import ResultPageReader
from taskiq_fanin.transport.client import (
    RedisClient,
    connect,
    reachable,
    set_up,
    without_password,
)
from taskiq_fanin.transport.outcome_batching import OutcomeBatcher, OutcomeBatching
from taskiq_fanin.transport.pipeline import PipelineBatcher
from taskiq_fanin.transport.queue_kicks import kicking_broker, prompt_broker
from taskiq_fanin.transport.recent_reads import RecentReads
from taskiq_fanin.transport.replication import replication

#: The brokers of this process whose FanInMiddleware keeps its keys in one
#: Redis under one prefix (each registers when it is given its broker), by
#: :func:`peers_of`: a step or a member whose task one of them knows is kicked
#: on that one, its own queue, whichever broker plans it. Weak: a broker let
#: go leaves.
_PEERS: dict[str, "weakref.WeakSet[AsyncBroker]"] = {}


def peers_of(prefix: str, redis: "str | RedisClient") -> str:
    """Which brokers share their fan-in: the same Redis (URL, or client) and prefix.

    Brokers whose middlewares name one Redis differently (two URLs of one
    server) are not peers: their tasks are refused as unknown, never kicked
    where their outcomes would land in another Redis.
    """
    where = redis if isinstance(redis, str) else f"client-{id(redis)}"
    return f"{prefix}@{where}"


def share_prefix(peers: str, broker: AsyncBroker) -> None:
    """``broker``'s middleware keeps its keys as ``peers`` says: its tasks go on it."""
    _PEERS.setdefault(peers, weakref.WeakSet()).add(broker)


def queue_name(broker: AsyncBroker) -> object:
    """The queue a broker kicks onto (taskiq-redis's ``queue_name``), if it says."""
    return getattr(broker, "queue_name", None)


#: Who claims a finaliser's lease, for inspection.
CLAIMANT = f"{socket.gethostname()}:{os.getpid()}"

#: Deliveries handled here are numbered after a random prefix of this process.
_DELIVERIES = itertools.count()
_PROCESS = secrets.token_hex(4)


def new_delivery() -> str:
    """An id for one delivery of a message, unique across processes and time.

    A hook that retries passes the same one again; a redelivery gets a new one.
    Cheaper than a random id per message (no system call).
    """
    return f"{_PROCESS}{next(_DELIVERIES):x}"


class StartChain(Protocol):
    """Starts a chain that is a member of a group (the chain engine does).

    The group engine kicks its members; one that is a chain goes through this,
    plugged in by the middleware, so that the group engine needs no chains.
    """

    def __call__(
        self,
        ctx: "FanInContext",
        spec: ChainSpec,
        *,
        chain_id: str,
        member: MemberRef,
        depth: int,
        earlier: Sequence[str] = (),
    ) -> Awaitable[object]:
        """Write the chain's record and kick its first step.

        ``earlier``: the ids the member's chain had before a re-drive.
        """


class CheckChain(Protocol):
    """Checks a chain that is a member of a group (the chain engine does).

    The group engine validates its members before anything is written; one that
    is a chain is checked through this, plugged in by the middleware, as it is
    started through :class:`StartChain`.
    """

    def __call__(
        self,
        ctx: "FanInContext",
        spec: ChainSpec,
        *,
        depth: int,
        after_previous: bool = False,
        checked: bool = False,
        within: str = "",
    ) -> None:
        """Raise the typed error of the first thing wrong with the chain.

        ``after_previous``: its first step receives a previous step's result.
        ``checked``: a plan checked already (arguments not bound again).
        ``within``: where the chain sits, for the errors (`` in member 3``).
        """


class CancelChain(Protocol):
    """Cancels a chain that is a member of a group (the chain engine does).

    A group's cancel reaches the chains among its members through this,
    plugged in by the middleware, as they are started through :class:`StartChain`.
    """

    def __call__(self, ctx: "FanInContext", chain_id: str) -> Awaitable[bool]:
        """Cancel the chain if it runs; False if it does not (over, or unknown)."""


@dataclass(frozen=True)
class FanInContext:
    """Config, Redis client, typed scripts and the kicker of one started broker."""

    config: FanInConfig
    redis: RedisClient
    #: ``redis`` was made from a URL here: :meth:`close` closes it.
    owns_redis: bool
    scripts: GroupScripts
    chain_scripts: ChainScripts
    start_chain: StartChain
    check_chain: CheckChain
    cancel_chain: CancelChain
    #: The user's broker; ``None`` for a middleware on its own (the CLI's), which
    #: reads and sweeps but kicks nothing.
    on_broker: AsyncBroker | None
    #: What the library's kicks go through: the broker, pipelined where it can be.
    pipelined: AsyncBroker | None
    #: What a kick someone waits on (a continuation's) goes through: at once.
    prompt: AsyncBroker | None
    #: Reads by-reference ``GroupResult`` s in pages.
    result_pages: ResultPageReader
    #: The brokers sharing this fan-in (``peers_of``): where other tasks go.
    peers: str = ""
    #: Whether a workflow was cancelled, as read lately (``is_cancelled()``):
    #: one read a second per workflow in this process, however many ask.
    cancel_reads: RecentReads[bool] = field(default_factory=RecentReads)
    #: The kickers of the brokers sharing this prefix (``kicker_for``), by broker.
    peer_kickers: dict[int, AsyncBroker] = field(default_factory=dict)
    #: Whether a worker with the middleware served a queue lately, as read
    #: lately (``worker/heartbeat.py``): one read a queue every 10 s.
    worker_reads: RecentReads[bool] = field(
        default_factory=lambda: RecentReads(fresh_for=10.0)
    )

    @classmethod
    async def open(
        cls,
        config: FanInConfig,
        broker: AsyncBroker | None,
        redis: str | RedisClient,
        *,
        cluster: bool = False,
        start_chain: StartChain,
        check_chain: CheckChain,
        cancel_chain: CancelChain,
        batching: OutcomeBatching | None = None,
    ) -> "FanInContext":
        """Connect (for a URL), check Redis answers, register the scripts.

        Raises ``RedisUnreachableError`` (naming the URL without its password)
        when Redis does not answer within ``socket_timeout``: a worker or a
        caller that cannot reach Redis says so when its broker starts, not at
        its first kick. A client passed in is the caller's, never closed here.
        """
        owned = isinstance(redis, str)
        client = (
            connect(
                redis,
                max_connections=config.max_connections,
                socket_timeout=config.socket_timeout,
                cluster=cluster,
            )
            if isinstance(redis, str)
            else redis
        )
        try:
            named = without_password(redis) if isinstance(redis, str) else ""
            await reachable(client, within=config.socket_timeout, name=named)
        except BaseException:
            if owned:
                await client.aclose()
            raise
        await set_up(client)
        pipeline = PipelineBatcher(client, replication=replication(config))
        pipelined = kicking_broker(broker) if broker is not None else None
        return cls(
            config=config,
            redis=client,
            owns_redis=owned,
            scripts=GroupScripts(client, pipeline, batching=batching),
            chain_scripts=ChainScripts(client, pipeline),
            start_chain=start_chain,
            check_chain=check_chain,
            cancel_chain=cancel_chain,
            on_broker=broker,
            pipelined=pipelined,
            prompt=prompt_broker(pipelined) if pipelined is not None else None,
            result_pages=ResultPageReader(config.prefix, pipeline),
            peers=peers_of(config.prefix, redis),
        )

    async def close(self) -> None:
        """Close the connection :meth:`open` made (never a caller's client)."""
        if self.owns_redis:
            await self.redis.aclose()

    @property
    def broker(self) -> AsyncBroker:
        """The user's broker: where tasks are looked up."""
        if self.on_broker is None:
            raise MiddlewareNotFoundError(
                reason="this FanInMiddleware is on no broker: it can read and sweep "
                "(dry run), not kick; add it with broker.with_middlewares(...)"
            )
        return self.on_broker

    @property
    def kicker(self) -> AsyncBroker:
        """What the library's kicks go through: the broker, pipelined if it can be."""
        return self.pipelined if self.pipelined is not None else self.broker

    @property
    def prompt_kicker(self) -> AsyncBroker:
        """What a continuation's kick goes through: at once, written before it waits."""
        return self.prompt if self.prompt is not None else self.broker

    @property
    def outcomes(self) -> OutcomeBatcher:
        """Batches member outcomes; the worker tells it which members run here."""
        return self.scripts.outcomes

    async def redis_now(self) -> float:
        """Redis's clock, in epoch seconds: every time the library keeps is on it."""
        seconds, micros = await self.redis.time()
        return float(seconds) + micros / 1_000_000

    def broker_for(self, task_name: str) -> AsyncBroker:
        """The broker that knows ``task_name``: this one, else one sharing its prefix.

        A task of another broker on another queue (the middleware on it too)
        is kicked there; an unknown name, here (validation refused it before).
        A broker on this broker's own queue routes nothing elsewhere: what its
        tasks are says nothing of what this queue's workers run.
        """
        own = self.broker
        if own.find_task(task_name) is not None:
            return own
        queue = queue_name(own)
        for peer in list(_PEERS.get(self.peers, ())):
            if queue_name(peer) != queue and peer.find_task(task_name) is not None:
                return peer
        return own

    def find_task(self, task_name: str) -> AsyncTaskiqDecoratedTask[..., Any] | None:
        """The task of this name on the broker that knows it, if any does."""
        return self.broker_for(task_name).find_task(task_name)

    def knows_task(self, task_name: str) -> bool:
        """Whether a broker sharing this prefix has a task of this name."""
        return self.find_task(task_name) is not None

    def kicker_for(self, task_name: str) -> AsyncBroker:
        """What a kick of ``task_name`` goes through: its broker, pipelined."""
        broker = self.broker_for(task_name)
        if broker is self.on_broker:
            return self.kicker
        found = self.peer_kickers.get(id(broker))
        if found is None:
            found = self.peer_kickers[id(broker)] = kicking_broker(broker)
        return found

    def prompt_kicker_for(self, task_name: str) -> AsyncBroker:
        """What a kick of ``task_name`` someone waits on goes through: at once."""
        if self.broker_for(task_name) is self.on_broker:
            return self.prompt_kicker
        return prompt_broker(self.kicker_for(task_name))


#: The message whose task body runs now, and the context that saw it start:
#: a ``@group_task`` body plans its group through it.
current_run: ContextVar[tuple[FanInContext, TaskiqMessage] | None] = ContextVar(
    "taskiq_fanin_current_run", default=None
)


#: How many times the running body added members to each group so far: a
#: copy of the same message (at least once) adds under the same batch ids.
run_additions: ContextVar[dict[str, int] | None] = ContextVar(
    "taskiq_fanin_run_additions", default=None
)


def enter_run(ctx: FanInContext, message: TaskiqMessage) -> None:
    """The body of ``message`` is about to run here, under ``ctx``.

    It plans groups through it (``@group_task``), and reads a by-reference
    ``GroupResult`` through its pages.
    """
    current_run.set((ctx, message))
    running_pages.set(ctx.result_pages)
    run_additions.set({})


def leave_run() -> None:
    """No body runs here any more: nothing may find its context."""
    current_run.set(None)
    running_pages.set(None)
    run_additions.set(None)
