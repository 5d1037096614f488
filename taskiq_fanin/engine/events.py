"""The engine's own events, made by the worker from taskiq's hooks.

taskiq calls a middleware before a body runs (``pre_execute``), when it
raised (``on_error``) and after it ran (``post_execute``), with its own
meanings (a retry middleware's ``NoResultError``, a skipped body). The worker
reads those (``worker/ending.py``) and hands the engine one of these, once
per hook: nothing below the worker knows taskiq's hook order.
"""

import enum
from dataclasses import dataclass
from typing import Any

from taskiq import TaskiqMessage, TaskiqResult


class Ending(enum.Enum):
    """How a run ended, as the engine records it."""

    #: The library skipped the body (done already, cancelled): nothing.
    SKIPPED = "skipped"
    #: The run comes again (a retry middleware's, or requeued): wait for it.
    REPEATED = "repeated"
    #: The body ran: its result, or its error, counts.
    RAN = "ran"
    #: The body stopped itself at a cancel (``raise_if_cancelled()``): nothing
    #: of it counts; what the cancel leaves open is closed.
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class RunStarting:
    """A message's body is about to run in this worker."""

    message: TaskiqMessage


@dataclass(frozen=True, slots=True)
class RunEnded:
    """A message's run ended: how, and the result that counts for it."""

    message: TaskiqMessage
    ending: Ending
    #: The body's result; for a body that raised ``NoResultError`` itself, a
    #: success with ``None`` (taskiq stores no result for it).
    result: "TaskiqResult[Any]"
