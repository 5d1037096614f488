"""What the verbs say when given the wrong kind of thing."""

from taskiq.decor import AsyncTaskiqDecoratedTask

from taskiq_fanin.domain.exceptions import InvalidGroupError
from taskiq_fanin.groups.arguments import public_name


def wrong_kind(
    what: str,
    value: object,
    expected: str,
    *,
    error: type[InvalidGroupError] = InvalidGroupError,
) -> InvalidGroupError:
    """``member 2 is ... , not a Signature``, with what to write instead.

    ``error``: ``InvalidChainError`` for a chain's step, so that it says chain.
    """
    if isinstance(value, AsyncTaskiqDecoratedTask):
        name = public_name(value)
        return error(
            reason=f"{what} is the task {value.task_name!r} itself, not {expected}: "
            f"give it its arguments with Signature.of({name}, ...)"
        )
    if value is None:
        return error(reason=f"{what} is None, not {expected}")
    kind = type(value).__name__
    article = "an" if kind[:1].lower() in "aeiou" else "a"
    return error(reason=f"{what} is {article} {kind}, not {expected}")
