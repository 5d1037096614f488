"""Composing helpers: ``group``, ``chain``, ``@group_task``, ``cancel``, ``status``."""

import functools
import inspect
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import ParamSpec

from taskiq import AsyncBroker, TaskiqMessage

from taskiq_fanin import guard
from taskiq_fanin.chain_record import ChainState, ChainStatus
from taskiq_fanin.chain_spec import Chain, ChainCursor, GroupStep
from taskiq_fanin.config import choice
from taskiq_fanin.errors import InvalidGroupError, MiddlewareNotFoundError
from taskiq_fanin.keys import is_valid_id
from taskiq_fanin.labels import DEPTH_LABEL
from taskiq_fanin.middleware import find_fanin
from taskiq_fanin.models import FailurePolicy, GroupState, GroupStatus, SweepPolicy
from taskiq_fanin.planning import GroupHandle
from taskiq_fanin.signature import Signature, TaskRef, as_signature

P = ParamSpec("P")
Members = Iterable["Signature | Chain"]


@dataclass(frozen=True)
class Group:
    """A group not yet planned: members, and what runs when they all have an outcome.

    Build one with :func:`group`; plan and dispatch it with ``await g.kiq(broker)``,
    or return it from a ``@group_task`` body to set a continuation with arguments
    known only at run time.
    """

    members: "tuple[Signature | Chain, ...]"
    then: TaskRef | Signature | None = None
    on_error: TaskRef | Signature | None = None
    group_id: str | None = None
    failure_policy: FailurePolicy | str | None = None
    sweep_policy: SweepPolicy | str | None = None
    ttl: float | None = None
    deadline: float | None = None
    cancellable: bool = False

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
            cancellable=self.cancellable,
        )

    def as_step(self) -> GroupStep:
        """This group as a chain step: the chain carries on instead of ``then``."""
        if self.then is not None or self.on_error is not None or self.group_id:
            raise InvalidGroupError(
                reason="a group inside a chain takes no then, on_error or group_id: "
                "the next step is its continuation"
            )
        return GroupStep(
            members=self.members,
            failure_policy=choice("failure_policy", FailurePolicy, self.failure_policy)
            if self.failure_policy is not None
            else None,
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
    cancellable: bool = False,
) -> Group:
    """Describe a group; nothing is written until it is kicked on a broker.

    ``await group(members, then=...).kiq(broker)`` plans and dispatches it.

    ``then`` receives a ``GroupResult`` as its first argument once every member has
    an outcome; with ``failure_policy="fail"``, ``on_error`` receives it instead
    when any member failed. A ``group_id`` makes planning idempotent. Members may
    be chains: each counts as finished when its last step ends. With
    ``cancellable``, members check for cancellation before they run (one Redis
    read each).
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
        cancellable=cancellable,
    )


def chain(
    *steps: "Signature | Group",
    on_error: TaskRef | Signature | None = None,
    chain_id: str | None = None,
) -> Chain:
    """Describe a chain; nothing is written until it is kicked on a broker.

    ``await chain(a, b, c).kiq(broker)`` starts it. Each step, when its last
    attempt succeeds, enqueues the next with its result as the first argument
    (``Signature.immutable()`` opts out). A step may be a
    ``group(...)``: the next step receives its ``GroupResult``. If a step fails for
    good, ``on_error`` receives a ``ChainFailure`` and the compensations of the
    completed steps (``Signature.with_compensation``) run in reverse order.
    """
    converted: list[Signature | GroupStep] = []
    for index, step in enumerate(steps):
        if isinstance(step, Group):
            converted.append(step.as_step())
        elif isinstance(step, Signature):
            converted.append(step)
        else:
            raise InvalidGroupError(
                reason=f"step {index} is a {type(step).__name__}, "
                "not a Signature or a group"
            )
    return Chain(
        steps=tuple(converted),
        on_error=as_signature(on_error) if on_error is not None else None,
        chain_id=chain_id,
    )


async def cancel(broker: AsyncBroker, workflow_id: str) -> bool:
    """Cancel a chain or a group by id (see ``FanInMiddleware.cancel``)."""
    return await find_fanin(broker).cancel(workflow_id)


async def status(broker: AsyncBroker, workflow_id: str) -> GroupStatus | ChainStatus:
    """The status of a group, or else of a chain, started through ``broker``."""
    fanin = find_fanin(broker)
    found = await fanin.status(workflow_id)
    if found.state is not GroupState.MISSING:
        return found
    chain_found = await fanin.chain_status(workflow_id)
    return chain_found if chain_found.state is not ChainState.MISSING else found


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
            if not is_valid_id(group_id):
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
                cancellable=spec.cancellable,
                depth=nesting_depth(message) + 1,
            )
            return handle.group_id

        fan_out.__annotations__ = {**func.__annotations__, "return": str}
        return fan_out

    return decorate


def nesting_depth(message: TaskiqMessage) -> int:
    """How deep the running message sits in groups and chains (0: at the top)."""
    cursor = ChainCursor.from_labels(message.labels)
    if cursor is not None:
        return cursor.depth
    raw = str(message.labels.get(DEPTH_LABEL, "0"))
    return int(raw) if raw.isdigit() else 0
