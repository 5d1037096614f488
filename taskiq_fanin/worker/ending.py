"""How a body's run ended, as recording sees it: skipped, to be repeated, or ran.

``NoResultError`` means two things in taskiq. A body raises it to say "ran, store
no result" (``Context.requeue`` raises it too, after sending its message again),
and the retry middlewares ignore it. For an attempt they send again, they put a
fresh ``NoResultError()`` in ``result.error`` instead of the body's error. So
``on_error`` remembers the exception the body raised (its ``exception`` argument
is always the body's own, whatever order the hooks run in), and ``post_execute``
compares it with ``result.error``. Whether the body was skipped comes from the
skip flag, before the error is looked at.
"""

import enum
from contextvars import ContextVar
from typing import Any

from taskiq import NoResultError, TaskiqMessage, TaskiqResult

#: The label ``Context.requeue`` counts its sends in (taskiq's name for it).
REQUEUE_LABEL = "X-Taskiq-requeue"

#: What this message's body raised (set only when it raised).
_raised: ContextVar[BaseException | None] = ContextVar(
    "taskiq_fanin_raised", default=None
)
#: This message's requeue count when it started: a change means it requeued itself.
_requeues: ContextVar[object] = ContextVar("taskiq_fanin_requeues", default=None)


class Ending(enum.Enum):
    """What a worker records for a run that ended."""

    #: The library skipped the body (done already, cancelled): nothing.
    SKIPPED = "skipped"
    #: The run comes again (a retry middleware's, or requeued): wait for it.
    REPEATED = "repeated"
    #: The body ran: its result, or its error, counts.
    RAN = "ran"


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
) -> tuple[Ending, TaskiqResult[Any]]:
    """How the run ended, and the result that counts for it.

    A body that raised ``NoResultError`` itself (and did not requeue) succeeded
    with ``None``, as taskiq stores no result for it.
    """
    if skipped:
        return Ending.SKIPPED, result
    error = result.error
    if not isinstance(error, NoResultError):
        return Ending.RAN, result
    if error is not raised or message.labels.get(REQUEUE_LABEL) != _requeues.get():
        return Ending.REPEATED, result
    succeeded = TaskiqResult[Any](
        is_err=False,
        return_value=None,
        execution_time=result.execution_time,
        labels=result.labels,
    )
    return Ending.RAN, succeeded
