"""Kicks the library makes share pipelines on taskiq-redis's queue brokers.

A group's members are kicked together, and a finaliser kicks a continuation
while other completions are being recorded. taskiq-redis's ``kick`` builds a new
``Redis`` client and makes one round trip per message; here the library's kicks
on a ``RedisStreamBroker`` or ``ListQueueBroker`` go through one long-lived client
on the broker's own connection pool, in pipelines (``batching``).

Everything else stays taskiq's: the kicker builds the message, every
middleware's ``pre_send`` and ``post_send`` runs around each kick, and a kick
returns only once Redis has its message. The Redis command is the one the
broker's own ``kick`` sends. A broker of another kind, or a subclass with a
``kick`` of its own, is used as it is.
"""

from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from taskiq import AsyncBroker, BrokerMessage
from taskiq_redis import ListQueueBroker, RedisStreamBroker

from taskiq_fanin.batching import PipelineBatcher

#: A broker's kick as one pipeline command: ``(broker, message) -> add to pipe``.
QueueCommand = Callable[[Any, BrokerMessage], Callable[[Any], object]]


def _queue_name(broker: ListQueueBroker | RedisStreamBroker, msg: BrokerMessage) -> str:
    return msg.labels.get("queue_name") or broker.queue_name


def _xadd(broker: RedisStreamBroker, msg: BrokerMessage) -> Callable[[Any], object]:
    # As RedisStreamBroker.kick sends it.
    return lambda pipe: pipe.xadd(
        _queue_name(broker, msg),
        {b"data": msg.message},
        maxlen=broker.maxlen,
        approximate=broker.approximate,
    )


def _lpush(broker: ListQueueBroker, msg: BrokerMessage) -> Callable[[Any], object]:
    # As ListQueueBroker.kick sends it.
    return lambda pipe: pipe.lpush(_queue_name(broker, msg), msg.message)


#: The kicks that can go in a pipeline, by the ``kick`` the broker runs.
PIPELINED_KICKS: dict[Any, QueueCommand] = {
    RedisStreamBroker.kick: _xadd,
    ListQueueBroker.kick: _lpush,
}


class PipelinedBroker:
    """Stands in for a broker in taskiq's kicker; its ``kick`` joins a pipeline.

    Every other attribute is the broker's own.
    """

    def __init__(self, broker: AsyncBroker, command: QueueCommand) -> None:
        self._broker = broker
        self._command = command
        self._client: Redis | None = None
        self._batcher: PipelineBatcher | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._broker, name)

    async def kick(self, message: BrokerMessage) -> None:
        """Add ``message`` to the queue; returns once Redis has it."""
        if self._batcher is None:
            # Not its owner: closing this client leaves the broker's pool open.
            self._client = Redis(connection_pool=self._broker.connection_pool)  # type: ignore[attr-defined]
            self._batcher = PipelineBatcher(self._client)
        await self._batcher(self._command(self._broker, message))


def kicking_broker(broker: AsyncBroker) -> AsyncBroker:
    """What the library's kicks go through: ``broker``, pipelined where it can be."""
    command = PIPELINED_KICKS.get(type(broker).kick)
    if command is None:
        return broker
    return PipelinedBroker(broker, command)  # type: ignore[return-value]
