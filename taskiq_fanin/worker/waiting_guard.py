"""The waiting-parent guard: a task body awaiting another task's result in a worker.

A body that waits on another holds its slot while the other runs; once every
slot is so held nothing runs, and the worker deadlocks (the seed's album
benchmark: 0 albums of 10 at 10 slots). With the middleware on its broker, a
body's ``wait_result()``, or its poll of the broker's result backend
(``is_result_ready``), meets ``waiting_guard``: ``raise`` (the default, as
Celery's ``disable_sync_subtasks``) raises ``WaitingInsideTaskError`` at once;
``warn`` logs a warning; ``off`` lets it be. Whatever the guard lets through,
the time spent waiting is observed per waiting task
(``taskiq_fanin_waiting_seconds``). Outside a task body (a client) nothing
changes.
"""

import functools
import logging
import time
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, TypeVar

from taskiq import AsyncBroker
from taskiq.task import AsyncTaskiqTask

from taskiq_fanin import metrics
from taskiq_fanin.context import current_run
from taskiq_fanin.domain.config import WaitingGuard
from taskiq_fanin.domain.exceptions import WaitingInsideTaskError

logger = logging.getLogger("taskiq_fanin")

T = TypeVar("T")

#: Marks what is guarded already: installing twice guards once.
_GUARDED = "_taskiq_fanin_guarded"
#: Inside a guarded ``wait_result()``: its polls of the backend are that wait.
_in_wait_result: ContextVar[bool] = ContextVar("taskiq_fanin_in_wait", default=False)
#: The body (its task id) whose wait was logged already under ``warn``.
_warned: ContextVar[str | None] = ContextVar("taskiq_fanin_warned", default=None)


def install(broker: AsyncBroker | None) -> None:
    """Guard ``wait_result()`` (in this process) and ``broker``'s result backend.

    A middleware on no broker (the CLI's) runs no task body: nothing to guard.
    """
    if broker is None:
        return
    if not getattr(AsyncTaskiqTask.wait_result, _GUARDED, False):
        AsyncTaskiqTask.wait_result = _guarded(AsyncTaskiqTask.wait_result)  # type: ignore[method-assign, assignment]
    backend = broker.result_backend
    ready = backend.is_result_ready
    if not getattr(ready, _GUARDED, False):
        backend.is_result_ready = _guarded_poll(ready)  # type: ignore[method-assign, assignment]


def _guarded(
    wait_result: Callable[..., Awaitable[T]],
) -> Callable[..., Awaitable[T]]:
    @functools.wraps(wait_result)
    async def wait_result_guarded(
        task: AsyncTaskiqTask[Any], *args: Any, **kwargs: Any
    ) -> T:
        waiting = _waiting(task.task_id)
        if waiting is None:
            return await wait_result(task, *args, **kwargs)
        started = time.monotonic()
        inside = _in_wait_result.set(True)  # its own polls are this one wait
        try:
            return await wait_result(task, *args, **kwargs)
        finally:
            _in_wait_result.reset(inside)
            metrics.waited(waiting, time.monotonic() - started)

    setattr(wait_result_guarded, _GUARDED, True)
    return wait_result_guarded


def _guarded_poll(
    is_result_ready: Callable[[str], Awaitable[bool]],
) -> Callable[[str], Awaitable[bool]]:
    @functools.wraps(is_result_ready)
    async def is_result_ready_guarded(task_id: str) -> bool:
        if not _in_wait_result.get():
            _waiting(task_id)
        return await is_result_ready(task_id)

    setattr(is_result_ready_guarded, _GUARDED, True)
    return is_result_ready_guarded


def _waiting(awaited: str) -> str | None:
    """The guard, asked as a body starts to wait on ``awaited``.

    Raises ``WaitingInsideTaskError`` under ``raise``; the waiting task's name
    (for the histogram) inside a body whose middleware lets it wait; ``None``
    outside a body.
    """
    running = current_run.get()
    if running is None:
        return None
    ctx, message = running
    guard = ctx.config.waiting_guard
    if guard is WaitingGuard.RAISE:
        raise WaitingInsideTaskError(task_name=message.task_name, awaited=awaited)
    if guard is WaitingGuard.WARN and _warned.get() != message.task_id:
        _warned.set(message.task_id)  # once a body, however often it polls
        logger.warning(
            "Task %s awaits the result of task %s inside a worker: it holds its "
            "slot meanwhile (waiting_guard='warn')",
            message.task_name,
            awaited,
        )
    return message.task_name
