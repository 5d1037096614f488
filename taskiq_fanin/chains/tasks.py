"""The library's own tasks that carry a chain past a group step.

A group step's continuation is one of these: it receives the group's
``GroupResult`` and, as a chain step like any other, hands it on (or fails the
chain). The middleware registers them on the user's broker.
"""

from collections.abc import AsyncIterator
from typing import TypeVar

from taskiq import AsyncBroker

from taskiq_fanin.domain.exceptions import GroupStepFailedError
from taskiq_fanin.domain.group_result import GroupResult
from taskiq_fanin.domain.results import MEMBERS_KEPT, MemberError, StepError
from taskiq_fanin.groups.recording import error_payload

T = TypeVar("T")


def step_error_payload(error: BaseException | None, limit: int) -> str:
    """A failed chain step's error as a small JSON summary (a ``StepError``).

    A failed group step's (``GroupStepFailedError``) names its failed members'
    errors and its lost members too, bounded: at most ``MEMBERS_KEPT`` of each,
    the lowest indexes, each message cut to ``limit // MEMBERS_KEPT`` (the whole
    stays near ``2 * limit``). Any other error reads as a member's does.
    """
    if not isinstance(error, GroupStepFailedError):
        return error_payload(error, limit)
    share = max(limit // MEMBERS_KEPT, 1)
    summary = StepError(
        type=type(error).__name__,
        message=str(error)[:limit],
        members={
            index: MemberError(type=kind, message=message[:share])
            for index, kind, message in sorted(error.member_errors)[:MEMBERS_KEPT]
        },
        lost=sorted(error.lost_members)[:MEMBERS_KEPT],
    )
    return summary.model_dump_json(exclude_defaults=True)


#: Carries a chain on past a group step.
CONTINUE_TASK_NAME = "taskiq_fanin.continue_chain"
#: Fails a chain whose group step failed (failure policy ``fail``).
FAIL_TASK_NAME = "taskiq_fanin.fail_chain"


async def continue_chain(result: GroupResult) -> GroupResult:
    """The continuation of a group step: hands the GroupResult to the next step.

    A by-reference one is handed on as it is: its results live until this
    completes plus the tombstone, and the next step reads them in pages.
    """
    return result


async def fail_chain(result: GroupResult) -> None:
    """The error continuation of a group step (policy fail): fails the chain.

    Its error names each failed member with its own error type and message
    (by reference: the first ``MEMBERS_KEPT`` of them, and of the lost).
    """
    most = MEMBERS_KEPT if result.by_reference else result.total
    errors = [item async for item in _first(result.iter_failures(), most)]
    lost = [index async for index in _first(result.iter_lost(), most)]
    details = "".join(
        f"; member {index}: {error.type}: {error.message}" for index, error in errors
    )
    if lost:
        details += f"; lost: {', '.join(str(index) for index in lost)}"
    raise GroupStepFailedError(
        group_id=result.group_id,
        total=result.total,
        failed=result.failed_count,
        lost=result.lost_count,
        details=details,
        member_errors=tuple(
            (index, error.type, error.message) for index, error in errors
        ),
        lost_members=tuple(lost),
    )


async def _first(items: AsyncIterator[T], most: int) -> AsyncIterator[T]:
    """The first ``most`` items: a by-reference result is read no further."""
    kept = 0
    async for item in items:
        if kept >= most:
            return
        yield item
        kept += 1


def register(broker: AsyncBroker) -> None:
    """Register the library's tasks on ``broker`` (once)."""
    for name, func in (
        (CONTINUE_TASK_NAME, continue_chain),
        (FAIL_TASK_NAME, fail_chain),
    ):
        if broker.find_task(name) is None:
            broker.register_task(func, task_name=name)
