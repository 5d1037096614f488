"""``@group_task``: a task whose body says what to fan out, and returns at once."""

import functools
import inspect
import uuid
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, ParamSpec, overload

from taskiq import TaskiqMessage
from taskiq.decor import AsyncTaskiqDecoratedTask

from taskiq_fanin.api.groups import Group, group
from taskiq_fanin.chains.cursor import ChainCursor
from taskiq_fanin.context import current_run
from taskiq_fanin.domain.exceptions import (
    GroupTaskOrderError,
    GroupTaskReturnError,
    MiddlewareNotFoundError,
    shown,
)
from taskiq_fanin.domain.ids import is_derived, is_valid_id
from taskiq_fanin.domain.labels import (
    ContinuationRef,
    MemberRef,
    OnErrorRef,
    depth_of,
)
from taskiq_fanin.domain.options import GroupOptions
from taskiq_fanin.domain.signature import Signature
from taskiq_fanin.domain.spec import ChainSpec, GroupSpec
from taskiq_fanin.groups.group_validation import validate_group
from taskiq_fanin.groups.planning import plan_group

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from taskiq_fanin.domain.options import GroupOptionsArgs

P = ParamSpec("P")
#: What a ``@group_task`` body may return: members (a list, an iterator, or
#: an async iterator: an ``async def`` body that yields), or a ``group(...)``.
Returned = (
    Iterable[Signature | ChainSpec] | AsyncIterable[Signature | ChainSpec] | GroupSpec
)
FanOut = Callable[P, Returned | Awaitable[Returned]]
Decorated = Callable[P, Awaitable[str]]


@overload
def group_task(func: FanOut[P], /) -> Decorated[P]: ...
@overload
def group_task(
    func: None = None, /, **options: "Unpack[GroupOptionsArgs]"
) -> Callable[[FanOut[P]], Decorated[P]]: ...


def group_task(
    func: FanOut[P] | None = None, /, **options: "Unpack[GroupOptionsArgs]"
) -> Decorated[P] | Callable[[FanOut[P]], Decorated[P]]:
    """Turn a function that returns members (or a ``group(...)``) into a fan-out task.

    Put it under ``@broker.task``. The body only says *what* to run; the library
    plans the members, dispatches them, wires ``then`` and returns the group id at
    once, so the fan-out never holds a worker slot while members run. The
    options are ``group(...)``'s; those of a returned ``group(...)`` win. The
    group id is the fan-out task's own id: a redelivered or retried fan-out plans
    the same group and dispatches nothing twice.
    """
    defaults = GroupOptions.parse(options)

    def decorate(body: FanOut[P]) -> Decorated[P]:
        if isinstance(body, AsyncTaskiqDecoratedTask):
            raise GroupTaskOrderError(name=body.task_name)

        @functools.wraps(body)
        async def fan_out(*args: P.args, **kwargs: P.kwargs) -> str:
            running = current_run.get()
            if running is None:
                raise MiddlewareNotFoundError(
                    reason=f"{body.__name__} is a group task: kick it on a broker "
                    "with FanInMiddleware instead of calling it"
                )
            ctx, message = running
            returned = body(*args, **kwargs)
            if inspect.isawaitable(returned):
                returned = await returned
            spec = _as_group(message.task_name, returned)
            group_id = spec.group_id or _own_id(message)
            planned = GroupSpec(
                members=spec.members,
                options=defaults.overridden_by(spec.options),
                group_id=group_id,
            )
            depth = nesting_depth(message) + 1
            derived = spec.group_id is None and is_derived(group_id)
            # Members from an iterator (a generator body) are planned a chunk
            # at a time, as ``group(members_iter)``'s are.
            stream = spec.stream if isinstance(spec, Group) else None
            plan = validate_group(
                ctx,
                planned,
                depth=depth,
                derived_id=derived,
                stream=stream,
                # Its own id (the fan-out's): a redelivery whose body builds
                # other members is the same fan-out, not another plan.
                named_by_caller=spec.group_id is not None,
            )
            return (await plan_group(ctx, plan)).group_id

        fan_out.__annotations__ = {**body.__annotations__, "return": str}
        return fan_out

    return decorate(func) if func is not None else decorate


def _as_group(task_name: str, returned: object) -> GroupSpec:
    """What the body returned, as a group: members, or a ``group(...)``."""
    if isinstance(returned, GroupSpec):
        return returned
    if isinstance(returned, AsyncIterable):
        return group(returned)
    if isinstance(returned, Iterable) and not isinstance(
        returned, str | bytes | dict | Signature | ChainSpec
    ):
        return group(returned)
    raise GroupTaskReturnError(name=task_name, returned=shown(returned))


def _own_id(message: TaskiqMessage) -> str:
    """The fan-out's task id, where it can name a group (else a fresh id).

    A task id of the shape the library derives is taken only when the message's
    own labels show the library gave it (a group's member, its continuation, a
    chain's step or error continuation): a task id set by hand cannot take a
    derived group id.
    """
    task_id = message.task_id
    if is_valid_id(task_id) or task_id in _derived_task_ids(message.labels):
        return task_id
    return uuid.uuid4().hex


def _derived_task_ids(labels: dict[str, Any]) -> set[str]:
    """The task ids the library gives a message with these labels."""
    refs = (
        MemberRef.from_labels(labels),
        ContinuationRef.from_labels(labels),
        ChainCursor.from_labels(labels),
    )
    ids = {
        ref.step_id if isinstance(ref, ChainCursor) else ref.task_id
        for ref in refs
        if ref is not None
    }
    failed_chain = OnErrorRef.from_labels(labels)
    if failed_chain is not None:
        ids.add(failed_chain.task_id)
    return ids


def nesting_depth(message: TaskiqMessage) -> int:
    """How deep the running message sits in groups and chains (0: at the top)."""
    cursor = ChainCursor.from_labels(message.labels)
    return cursor.depth if cursor is not None else depth_of(message.labels)
