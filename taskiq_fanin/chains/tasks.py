"""The library's own tasks that carry a chain past a group step.

A group step's continuation is one of these: it receives the group's
``GroupResult`` and, as a chain step like any other, hands it on (or fails the
chain). The middleware registers them on the user's broker.
"""

from taskiq import AsyncBroker

from taskiq_fanin.model.errors import GroupStepFailedError
from taskiq_fanin.model.results import GroupResult

#: Carries a chain on past a group step.
CONTINUE_TASK_NAME = "taskiq_fanin.continue_chain"
#: Fails a chain whose group step failed (failure policy ``fail``).
FAIL_TASK_NAME = "taskiq_fanin.fail_chain"


async def continue_chain(result: GroupResult) -> GroupResult:
    """The continuation of a group step: hands the GroupResult to the next step."""
    return result


async def fail_chain(result: GroupResult) -> None:
    """The error continuation of a group step (policy fail): fails the chain.

    Its error names each failed member with its own error type and message.
    """
    details = "".join(
        f"; member {index}: {error.type}: {error.message}"
        for index, error in sorted(result.failed.items())
    )
    if result.lost:
        details += f"; lost: {', '.join(str(index) for index in result.lost)}"
    raise GroupStepFailedError(
        group_id=result.group_id,
        total=result.total,
        failed=result.failed_count,
        lost=len(result.lost),
        details=details,
        member_errors=tuple(
            (index, error.type, error.message)
            for index, error in sorted(result.failed.items())
        ),
        lost_members=tuple(result.lost),
    )


def register(broker: AsyncBroker) -> None:
    """Register the library's tasks on ``broker`` (once)."""
    for name, func in (
        (CONTINUE_TASK_NAME, continue_chain),
        (FAIL_TASK_NAME, fail_chain),
    ):
        if broker.find_task(name) is None:
            broker.register_task(func, task_name=name)
