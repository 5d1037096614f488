"""The fan-out helpers: ``group(...)`` from anywhere, ``@group_task`` for tasks."""

import functools
import inspect
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import ParamSpec

from taskiq import AsyncBroker

from taskiq_fanin import guard
from taskiq_fanin.errors import MiddlewareNotFoundError
from taskiq_fanin.keys import GROUP_ID_PATTERN
from taskiq_fanin.middleware import find_fanin
from taskiq_fanin.models import FailurePolicy, GroupStatus, SweepPolicy
from taskiq_fanin.planning import GroupHandle
from taskiq_fanin.signature import Signature, TaskRef

P = ParamSpec("P")
Members = Iterable[Signature]


@dataclass(frozen=True)
class Group:
    """A group not yet planned: members, and what runs when they all have an outcome.

    Build one with :func:`group`; plan and dispatch it with ``await g.kiq(broker)``,
    or return it from a ``@group_task`` body to set a continuation with arguments
    known only at run time.
    """

    members: tuple[Signature, ...]
    then: TaskRef | Signature | None = None
    on_error: TaskRef | Signature | None = None
    group_id: str | None = None
    failure_policy: FailurePolicy | str | None = None
    sweep_policy: SweepPolicy | str | None = None
    ttl: float | None = None
    deadline: float | None = None

    async def kiq(self, broker: AsyncBroker) -> GroupHandle:
        """Plan and dispatch on ``broker`` (see ``FanInMiddleware.group``)."""
        return await find_fanin(broker).group(
            self.members,
            then=self.then,
            on_error=self.on_error,
            group_id=self.group_id,
            failure_policy=self.failure_policy,
            sweep_policy=self.sweep_policy,
            ttl=self.ttl,
            deadline=self.deadline,
        )


#: What a ``@group_task`` body may return.
Returned = Members | Group


def group(
    members: Members,
    *,
    then: TaskRef | Signature | None = None,
    on_error: TaskRef | Signature | None = None,
    group_id: str | None = None,
    failure_policy: FailurePolicy | str | None = None,
    sweep_policy: SweepPolicy | str | None = None,
    ttl: float | None = None,
    deadline: float | None = None,
) -> Group:
    """Describe a group; nothing is written until it is kicked on a broker.

    ``await group(members, then=...).kiq(broker)`` plans and dispatches it.

    ``then`` receives a ``GroupResult`` as its first argument once every member has
    an outcome; with ``failure_policy="fail"``, ``on_error`` receives it instead
    when any member failed. A ``group_id`` makes planning idempotent.
    """
    return Group(
        members=tuple(members),
        then=then,
        on_error=on_error,
        group_id=group_id,
        failure_policy=failure_policy,
        sweep_policy=sweep_policy,
        ttl=ttl,
        deadline=deadline,
    )


async def status(broker: AsyncBroker, group_id: str) -> GroupStatus:
    """The status of a group planned through ``broker``."""
    return await find_fanin(broker).status(group_id)


def group_task(
    *,
    then: TaskRef | Signature | None = None,
    on_error: TaskRef | Signature | None = None,
    failure_policy: FailurePolicy | str | None = None,
    sweep_policy: SweepPolicy | str | None = None,
    ttl: float | None = None,
    deadline: float | None = None,
) -> Callable[
    [Callable[P, Returned | Awaitable[Returned]]], Callable[P, Awaitable[str]]
]:
    """Turn a function that returns members (or a ``group(...)``) into a fan-out task.

    Put it under ``@broker.task``. The task's body only says *what* to run; the
    library plans the members, dispatches them, wires ``then`` and returns the
    group id at once, so the fan-out never holds a worker slot while members run.
    The group id is the fan-out task's own id: a redelivered or retried fan-out
    plans the same group and dispatches nothing twice.
    """

    def decorate(
        func: Callable[P, Returned | Awaitable[Returned]],
    ) -> Callable[P, Awaitable[str]]:
        @functools.wraps(func)
        async def fan_out(*args: P.args, **kwargs: P.kwargs) -> str:
            running = guard.current.get()
            if running is None:
                raise MiddlewareNotFoundError(
                    reason=f"{func.__name__} is a group task: kick it on a broker "
                    "with FanInMiddleware instead of calling it"
                )
            fanin, message = running
            returned = func(*args, **kwargs)
            if inspect.isawaitable(returned):
                returned = await returned
            spec = returned if isinstance(returned, Group) else group(returned)
            group_id = message.task_id
            if not GROUP_ID_PATTERN.fullmatch(group_id):
                group_id = uuid.uuid4().hex
            handle = await fanin.group(
                spec.members,
                then=spec.then or then,
                on_error=spec.on_error or on_error,
                group_id=group_id,
                failure_policy=spec.failure_policy or failure_policy,
                sweep_policy=spec.sweep_policy or sweep_policy,
                ttl=spec.ttl or ttl,
                deadline=spec.deadline or deadline,
            )
            return handle.group_id

        fan_out.__annotations__ = {**func.__annotations__, "return": str}
        return fan_out

    return decorate
