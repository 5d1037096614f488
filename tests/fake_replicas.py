"""Replicas faked on fakeredis, which knows no ``WAIT``: each pipeline's ``WAIT``
is sent as an ``ECHO`` of the acknowledgements the test sets, so what the store
does with too few is shown without a replica (``test_durability_replica.py``
has a real one). ``Refusing`` answers per pipeline: 0 for those it picks.
"""

from collections.abc import Callable
from typing import Any

from fakeredis.aioredis import FakeRedis
from redis.asyncio.client import Pipeline

#: Commands of a pipeline, as redis-py queues them.
Stack = list[tuple[Any, ...]]


class Replicas:
    """The acknowledgements a faked WAIT answers, and the WAITs sent."""

    def __init__(self) -> None:
        self.acknowledged = 1
        self.waits: list[tuple[Any, ...]] = []


class WaitingPipeline(Pipeline):  # type: ignore[misc]
    replicas: Replicas

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        if args[0] == "WAIT":
            self.replicas.waits.append(args[1:])
            return super().execute_command("ECHO", self.replicas.acknowledged)
        return super().execute_command(*args, **kwargs)


class WaitingRedis(FakeRedis):  # type: ignore[misc]
    replicas: Replicas

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        pipe = WaitingPipeline(
            self.connection_pool, self.response_callbacks, transaction, shard_hint
        )
        pipe.replicas = self.replicas
        return pipe


class Refusing(Replicas):
    """A faked ``WAIT`` answers 0 for the pipelines ``refuse`` picks, else 1."""

    def __init__(self) -> None:
        super().__init__()
        self.refuse: Callable[[Stack], bool] = lambda _: False


class RefusingPipeline(WaitingPipeline):
    replicas: Refusing

    def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        if args[0] == "WAIT":
            stack = [command for command, _ in self.command_stack]
            self.replicas.acknowledged = 0 if self.replicas.refuse(stack) else 1
        return super().execute_command(*args, **kwargs)


class RefusingRedis(WaitingRedis):
    replicas: Refusing

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        pipe = RefusingPipeline(
            self.connection_pool, self.response_callbacks, transaction, shard_hint
        )
        pipe.replicas = self.replicas
        return pipe
