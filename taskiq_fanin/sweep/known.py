"""Which tasks the sweep's broker knows: a re-drive never kicks one it does not.

taskiq acknowledges and drops a message whose task its worker cannot find,
before any middleware runs: a member or step renamed in a deploy would be
dropped again at every re-drive. The sweep runs with the user's broker (the
scheduled task in a worker, the CLI with ``--broker``), so what that broker
knows is what the workers know. A broker that knows none of the user's tasks
(only the library's own: the CLI given a broker module whose tasks were not
imported) cannot tell, and neither can a sweep with no broker (the CLI given
only ``--redis-url``): they check nothing, and the report says so
(``SweepReport.tasks_checked``).
"""

from taskiq_fanin.chains.tasks import CONTINUE_TASK_NAME, FAIL_TASK_NAME
from taskiq_fanin.context import FanInContext
from taskiq_fanin.domain.signature import Signature
from taskiq_fanin.domain.spec import ChainSpec, GroupSpec

#: The library's own task names start with this: they tell nothing of the user's.
_OWN_TASKS = "taskiq_fanin."


def tasks_checked(ctx: FanInContext) -> bool:
    """Whether the sweep's broker knows any task of the user's, to check against."""
    if ctx.on_broker is None:
        return False
    names = ctx.on_broker.get_all_tasks()
    return any(not name.startswith(_OWN_TASKS) for name in names)


def _unknown(ctx: FanInContext, names: list[str]) -> list[str]:
    """``names`` the broker does not know, each once, in order."""
    return [name for name in dict.fromkeys(names) if not ctx.knows_task(name)]


def _first_tasks(member: Signature | ChainSpec) -> list[str]:
    """The tasks that kicking a group member kicks at once."""
    if isinstance(member, Signature):
        return [member.task_name]
    if not member.steps:
        return []
    return _step_tasks(member.steps[0])


def _step_tasks(step: Signature | GroupSpec) -> list[str]:
    """The tasks that kicking a chain step kicks, or that carry it on.

    A group step's: its members' first tasks, and the library's continuations
    that carry the chain past it.
    """
    if isinstance(step, Signature):
        return [step.task_name]
    names = [name for member in step.members for name in _first_tasks(member)]
    return [*names, CONTINUE_TASK_NAME, FAIL_TASK_NAME]


def unknown_in_member(ctx: FanInContext, member: Signature | ChainSpec) -> list[str]:
    """The tasks of a group member (a chain's: its first step's) the broker lacks."""
    return _unknown(ctx, _first_tasks(member))


def unknown_in_step(ctx: FanInContext, step: Signature | GroupSpec) -> list[str]:
    """The tasks of a chain step (a group step's: its members') the broker lacks."""
    return _unknown(ctx, _step_tasks(step))


def unknown_note(names: list[str]) -> str:
    """``task 'a' unknown`` / ``tasks 'a', 'b' unknown``, to this broker."""
    quoted = ", ".join(f"'{name}'" for name in names)
    return f"task{'s' if len(names) > 1 else ''} {quoted} unknown to this broker"
