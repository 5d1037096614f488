"""A task with its arguments, ready to be kicked later: taskiq tasks have none."""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from taskiq import AsyncBroker
from taskiq.decor import AsyncTaskiqDecoratedTask
from taskiq.kicker import AsyncKicker

from taskiq_fanin.domain.exceptions import NotATaskError, shown

TaskRef = AsyncTaskiqDecoratedTask[Any, Any] | str


class Signature(BaseModel):
    """Run this task with these arguments: the unit groups and chains are built of.

    Build one with :meth:`of` (``Signature.of(resize, album, 3)``) or the
    :func:`signature` shortcut. It serializes to JSON, which is how the ledger keeps
    every planned member so that the sweep can kick it again.
    """

    model_config = ConfigDict(frozen=True, populate_by_name=True)

    task_name: str = Field(alias="t")
    args: tuple[Any, ...] = Field(default=(), alias="a")
    kwargs: dict[str, Any] = Field(default_factory=dict, alias="k")
    labels: dict[str, Any] = Field(default_factory=dict, alias="l")
    #: In a chain: whether this step receives the previous step's result first.
    pass_result: bool = Field(default=True, alias="p")
    #: In a chain: what undoes this step if a later step fails for good.
    compensation: "Signature | None" = Field(default=None, alias="c")

    @classmethod
    def of(cls, task: TaskRef, /, *args: Any, **kwargs: Any) -> "Signature":
        """Signature of ``task(*args, **kwargs)``; ``task`` is a task or its name.

        The arguments are bound against the task's signature when the group or
        chain is kicked, not here: a task given by name is looked up then.
        """
        if isinstance(task, str):
            return cls(task_name=task, args=args, kwargs=kwargs)
        if isinstance(task, AsyncTaskiqDecoratedTask):
            return cls(task_name=task.task_name, args=args, kwargs=kwargs)
        raise _not_a_task(task)

    def with_labels(self, **labels: Any) -> "Signature":
        """A copy with extra taskiq labels (``retry_on_error``, ``timeout``, ...)."""
        return self.model_copy(update={"labels": {**self.labels, **labels}})

    def immutable(self) -> "Signature":
        """A copy that, as a chain step, does not receive the previous result."""
        return self.model_copy(update={"pass_result": False})

    def with_compensation(self, compensation: "Signature") -> "Signature":
        """A copy that, as a chain step, is undone by ``compensation`` (a saga).

        If a later step fails for good, or the chain is cancelled, the compensations
        of the steps already completed run once each, in reverse order.
        """
        return self.model_copy(update={"compensation": compensation})

    def prepend(self, *args: Any) -> "Signature":
        """A copy whose call receives ``args`` before its own arguments."""
        return self.model_copy(update={"args": (*args, *self.args)})

    def kicker(self, broker: AsyncBroker) -> AsyncKicker[Any, Any]:
        """A taskiq kicker for this signature on ``broker``, labels applied."""
        task = broker.find_task(self.task_name)
        labels = {**(task.labels if task is not None else {}), **self.labels}
        return AsyncKicker(task_name=self.task_name, broker=broker, labels=labels)

    def to_ledger(self) -> str:
        """Compact JSON for the ledger (short field names keep big groups small)."""
        return self.model_dump_json(by_alias=True, exclude_defaults=True)

    @classmethod
    def from_ledger(cls, data: str | bytes) -> "Signature":
        """Inverse of :meth:`to_ledger`."""
        return cls.model_validate_json(data)


def _not_a_task(value: object) -> NotATaskError:
    """What ``Signature.of`` says when given neither a task nor a task name."""
    name = getattr(value, "__name__", None)
    if callable(value) and isinstance(name, str) and name.isidentifier():
        return NotATaskError(
            given=f"{name} is a plain function",
            fix=f"decorate it with @broker.task, then use Signature.of({name}, ...)",
        )
    kind = type(value).__name__
    article = "an" if kind[:1].lower() in "aeiou" else "a"
    return NotATaskError(
        given=f"Signature.of was given {article} {kind}, {shown(value)}",
        fix="give it a task decorated with @broker.task, or a task's name",
    )


def as_signature(target: "TaskRef | Signature") -> Signature:
    """Accept a task, a task name or a signature where a continuation is expected."""
    if isinstance(target, Signature):
        return target
    return Signature.of(target)
