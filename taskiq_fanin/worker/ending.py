"""How a body's run ended, read from taskiq's hooks: skipped, to be repeated, or ran.

``NoResultError`` means two things in taskiq. A body raises it to say "ran, store
no result" (``Context.requeue`` raises it too, after sending its message again),
and the retry middlewares ignore it. For an attempt they send again, they put a
fresh ``NoResultError()`` in ``result.error`` instead of the body's error. So
``on_error`` remembers the exception the body raised (its ``exception`` argument
is always the body's own, whatever order the hooks run in), and ``post_execute``
compares it with ``result.error``. Whether the body was skipped comes from the
skip flag, before the error is looked at.
"""

from contextvars import ContextVar
from typing import Any

from taskiq import NoResultError, TaskiqMessage, TaskiqResult

from taskiq_fanin.domain.exceptions import Skip, WorkflowCancelledError
from taskiq_fanin.engine.events import Ending, RunEnded

#: The label ``Context.requeue`` counts its sends in (taskiq's name for it).
REQUEUE_LABEL = "X-Taskiq-requeue"

#: What this message's body raised (set only when it raised).
_raised: ContextVar[BaseException | None] = ContextVar(
    "taskiq_fanin_raised", default=None
)
#: This message's requeue count when it started: a change means it requeued itself.
_requeues: ContextVar[object] = ContextVar("taskiq_fanin_requeues", default=None)


def began(message: TaskiqMessage) -> None:
    """Forget the last message's error (brokers may run messages inline)."""
    _raised.set(None)
    _requeues.set(message.labels.get(REQUEUE_LABEL))


def body_raised(exception: BaseException) -> None:
    """Remember what this message's body raised (from ``on_error``)."""
    _raised.set(exception)


def take_raised() -> BaseException | None:
    """What this message's body raised, if anything; forgotten now."""
    raised = _raised.get()
    _raised.set(None)
    return raised


def ended(
    message: TaskiqMessage,
    result: TaskiqResult[Any],
    *,
    skipped: bool,
    raised: BaseException | None,
) -> RunEnded:
    """The engine's event for this run: how it ended, and the result that counts.

    A body that raised ``NoResultError`` itself (and did not requeue) succeeded
    with ``None``, as taskiq stores no result for it; one that raised
    ``WorkflowCancelledError`` (a ``NoResultError``) stopped at a cancel, and
    one that raised ``Skip`` (one too) ran, its error saying it skipped.
    """
    if skipped:
        return RunEnded(message, Ending.SKIPPED, result)
    error = result.error
    if not isinstance(error, NoResultError):
        return RunEnded(message, Ending.RAN, result)
    if error is not raised or message.labels.get(REQUEUE_LABEL) != _requeues.get():
        return RunEnded(message, Ending.REPEATED, result)
    if isinstance(error, WorkflowCancelledError):
        return RunEnded(message, Ending.CANCELLED, result)
    if isinstance(error, Skip):  # its error says so: recorded skipped
        return RunEnded(message, Ending.RAN, result)
    succeeded = TaskiqResult[Any](
        is_err=False,
        return_value=None,
        execution_time=result.execution_time,
        labels=result.labels,
    )
    return RunEnded(message, Ending.RAN, succeeded)
