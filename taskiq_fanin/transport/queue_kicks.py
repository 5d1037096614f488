"""Pipelined kicks on taskiq-redis's queue brokers.

A group's members are kicked together, and a finaliser kicks a continuation
while other completions are being recorded. taskiq-redis's ``kick`` makes one round
trip per message (and on a single server builds a new ``Redis`` client for it);
here the library's kicks on a ``RedisStreamBroker`` or ``ListQueueBroker`` go in
pipelines, through one long-lived client on the broker's own connection pool,
and on a ``RedisStreamClusterBroker`` or ``ListQueueClusterBroker`` through the
broker's own ``RedisCluster`` client. A queue is one key, so on a cluster its
kicks are one slot's: the cluster pipeline sends them to that slot's node in
one round trip (and a message for another queue to that queue's node). A
continuation's kick, which the group's last member waits on, goes at once and
alone (:func:`prompt_broker`), on the same client.

Everything else stays taskiq's: the kicker builds the message, every
middleware's ``pre_send`` and ``post_send`` runs around each kick, and a kick
returns only once Redis has its message. taskiq has no way to add a message
to a pipeline, so here, and nowhere else, the library writes what taskiq-redis
1.2's own ``kick`` writes, and must match it:

- ``RedisStreamBroker.kick`` and ``RedisStreamClusterBroker.kick``:
  ``XADD <queue> MAXLEN [~] <maxlen> * data <message>``, with the broker's
  ``maxlen`` and ``approximate``;
- ``ListQueueBroker.kick`` and ``ListQueueClusterBroker.kick``:
  ``LPUSH <queue> <message>``;
- ``<queue>``: the message's ``queue_name`` label, else the broker's
  ``queue_name``; on the broker's own connections (its ``connection_pool``,
  or a cluster broker's ``redis``).

:func:`queue_of` reads those attributes. ``tests/test_dispatch.py`` (single
server: stream, list) and ``tests/test_cluster_workflows.py`` (cluster: stream,
list) compare what a pipelined kick writes with what the broker's own ``kick``
writes, and fail when taskiq-redis changes either. Any other broker (the
Sentinel ones, a PubSub one, a subclass with a ``kick`` of its own, one whose
attributes are not as expected) is kicked through its own ``kick``: taskiq's
API, paced on the Sentinel ones (``paced_kicks.py``).
"""

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis, RedisCluster
from taskiq import AsyncBroker, BrokerMessage
from taskiq_redis import (
    ListQueueBroker,
    ListQueueClusterBroker,
    RedisStreamBroker,
    RedisStreamClusterBroker,
)

from taskiq_fanin.transport.paced_kicks import paced
from taskiq_fanin.transport.pipeline import Command, PipelineBatcher

logger = logging.getLogger("taskiq_fanin")

#: Adds one message to a queue, as a pipeline command: ``(queue, data)``.
AddToQueue = Callable[[str, bytes], Command]


@dataclass(frozen=True)
class BrokerQueue:
    """Where a taskiq-redis queue broker's ``kick`` writes, and with which command.

    ``client`` is on the broker's own connections, and the broker closes them.
    """

    client: Redis | RedisCluster
    queue_name: str
    add: AddToQueue


def queue_of(broker: AsyncBroker) -> BrokerQueue | None:
    """The queue behind ``broker``'s own ``kick``; ``None`` if not pipelined.

    The one place that reads taskiq-redis's attributes (``connection_pool``, or
    a cluster broker's ``redis``; ``queue_name``; a stream's ``maxlen`` and
    ``approximate``).
    """
    kick = type(broker).kick
    add: AddToQueue
    try:
        if kick in (RedisStreamBroker.kick, RedisStreamClusterBroker.kick):
            stream: RedisStreamBroker | RedisStreamClusterBroker = broker  # type: ignore[assignment]
            maxlen, approximate = stream.maxlen, stream.approximate

            def add(queue: str, data: bytes) -> Command:
                # As RedisStreamBroker.kick sends it.
                return lambda pipe: pipe.xadd(
                    queue, {b"data": data}, maxlen=maxlen, approximate=approximate
                )

        elif kick in (ListQueueBroker.kick, ListQueueClusterBroker.kick):

            def add(queue: str, data: bytes) -> Command:
                # As ListQueueBroker.kick sends it.
                return lambda pipe: pipe.lpush(queue, data)

        else:
            return None
        client = _client_of(broker)
        queue_name = broker.queue_name  # type: ignore[attr-defined]
    except AttributeError as exc:
        logger.warning(
            "taskiq-redis's %s is not as expected (%s): kicks go one by one",
            type(broker).__name__,
            exc,
        )
        return None
    return BrokerQueue(client=client, queue_name=queue_name, add=add)


def _client_of(broker: AsyncBroker) -> Redis | RedisCluster:
    """A client on the broker's own connections, which the broker closes."""
    if isinstance(broker, RedisStreamClusterBroker | ListQueueClusterBroker):
        cluster: RedisCluster = broker.redis
        return cluster
    # Not the pool's owner: closing this client leaves the broker's pool open.
    return Redis(connection_pool=broker.connection_pool)  # type: ignore[attr-defined]


class PipelinedBroker:
    """Stands in for a broker in taskiq's kicker; its ``kick`` joins a pipeline.

    Every other attribute is the broker's own. ``at_once``: each kick goes at
    once, alone (``PipelineBatcher.now``), on the same connections.
    """

    def __init__(
        self,
        broker: AsyncBroker,
        queue: BrokerQueue,
        *,
        pipeline: PipelineBatcher | None = None,
        at_once: bool = False,
    ) -> None:
        self._broker = broker
        self._queue = queue
        self.pipeline = pipeline or PipelineBatcher(queue.client)
        self._at_once = at_once

    def __getattr__(self, name: str) -> Any:
        return getattr(self._broker, name)

    def prompt(self) -> "PipelinedBroker":
        """The same broker, kicking at once: for a kick someone waits on."""
        return PipelinedBroker(
            self._broker, self._queue, pipeline=self.pipeline, at_once=True
        )

    async def kick(self, message: BrokerMessage) -> None:
        """Add ``message`` to its queue; returns once Redis has it."""
        queue = message.labels.get("queue_name") or self._queue.queue_name
        command = self._queue.add(queue, message.message)
        await (self.pipeline.now if self._at_once else self.pipeline)(command)


def kicking_broker(broker: AsyncBroker) -> AsyncBroker:
    """What the library's kicks go through: ``broker``, pipelined where it can be.

    Else paced, on a broker that cannot take many kicks at once (``paced_kicks``).
    """
    queue = queue_of(broker)
    if queue is None:
        return paced(broker)
    return PipelinedBroker(broker, queue)  # type: ignore[return-value]


def prompt_broker(kicking: AsyncBroker) -> AsyncBroker:
    """What a kick someone waits on goes through: at once, not in the next batch.

    A broker's own ``kick`` goes at once already.
    """
    if isinstance(kicking, PipelinedBroker):
        return kicking.prompt()  # type: ignore[return-value]
    return kicking
