"""Skipping a task body that must not run (a continuation that already ran, ...).

taskiq has no way for a middleware to skip a task, so a message whose body must
not run is skipped by a thin wrapper around the task's function, installed the
first time it is needed. The wrapper raises ``NoResultError``, which taskiq
treats as "ran, store nothing", and the retry middlewares ignore; recording
knows the body was skipped from the flag, not from the error (``ending.py``).
"""

import functools
import inspect
from contextvars import ContextVar
from typing import Any

from taskiq import AsyncBroker, NoResultError, TaskiqMessage

#: Set for one message when its body must not run.
_skip: ContextVar[bool] = ContextVar("taskiq_fanin_skip", default=False)

_GUARDED = "__taskiq_fanin_guarded__"


def skip_current_message(broker: AsyncBroker, message: TaskiqMessage) -> None:
    """Make this message's task body a no-op, leaving other messages alone."""
    task = broker.find_task(message.task_name)
    if task is None:
        return
    func = task.original_func
    if not getattr(func, _GUARDED, False):
        task.original_func = _guarded(func)
    _skip.set(True)


def _guarded(func: Any) -> Any:
    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def guarded_async(*args: Any, **kwargs: Any) -> Any:
            if _skip.get():
                raise NoResultError
            return await func(*args, **kwargs)

        setattr(guarded_async, _GUARDED, True)
        return guarded_async

    @functools.wraps(func)
    def guarded_sync(*args: Any, **kwargs: Any) -> Any:
        if _skip.get():
            raise NoResultError
        return func(*args, **kwargs)

    setattr(guarded_sync, _GUARDED, True)
    return guarded_sync


def reset_skip() -> bool:
    """Forget the skip flag (brokers may run messages inline); was it set?"""
    was = _skip.get()
    _skip.set(False)
    return was
