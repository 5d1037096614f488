"""Arguments bound against the task's own signature, before anything is written.

Arguments that do not fit a task fail only in the worker, after the group or
chain is written; binding them as Python would call the function refuses them
at ``kiq()`` instead. The parameters taskiq fills itself (``TaskiqDepends()``,
``Context``) are left out: a caller never passes them. Whether a call binds
depends only on how many positional arguments it has and which keywords, so
a task's signature is read once and each shape of call bound once.
"""

import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from weakref import WeakKeyDictionary

from taskiq.decor import AsyncTaskiqDecoratedTask
from taskiq_dependencies.dependency import Dependency

from taskiq_fanin.domain.exceptions import ArgumentsMismatchError
from taskiq_fanin.domain.signature import Signature

#: taskiq renames the user's function with this suffix (``taskiq/decor.py``).
TASKIQ_SUFFIX = "__taskiq_original"
#: The most call shapes remembered per task (a bound on a cache, not on calls).
_SHAPES = 64

Shape = tuple[int, frozenset[str]]


def public_name(task: AsyncTaskiqDecoratedTask[Any, Any]) -> str:
    """The name the user gave the task's function (taskiq renames it)."""
    name = str(getattr(task.original_func, "__name__", ""))
    return name.removesuffix(TASKIQ_SUFFIX) or task.task_name.rpartition(":")[2]


@dataclass
class _Parameters:
    """A task's parameters as its callers see them, and the shapes bound so far."""

    signature: inspect.Signature
    shown: str
    outcomes: dict[Shape, str | None] = field(default_factory=dict)

    def mismatch(self, shape: Shape) -> str | None:
        """Python's bind error for a call of this shape, or ``None`` if it binds."""
        if shape in self.outcomes:
            return self.outcomes[shape]
        positional, keywords = shape
        try:
            self.signature.bind(*range(positional), **dict.fromkeys(keywords))
        except TypeError as exc:
            outcome: str | None = str(exc)
        else:
            outcome = None
        if len(self.outcomes) < _SHAPES:
            self.outcomes[shape] = outcome
        return outcome


_PARAMETERS: "WeakKeyDictionary[Callable[..., Any], _Parameters | None]" = (
    WeakKeyDictionary()
)


def check_arguments(
    task: AsyncTaskiqDecoratedTask[Any, Any],
    what: str,
    sig: Signature,
    *,
    receives: str | None = None,
) -> None:
    """Raise :class:`ArgumentsMismatchError` if ``sig`` cannot call ``task``.

    ``task``: the planner's broker's, found by ``sig.task_name``. ``receives``:
    what the library passes first (``the GroupResult``), if anything. A task
    whose signature Python cannot read is not checked.
    """
    parameters = _parameters_of(task)
    if parameters is None:
        return
    positional = len(sig.args) + (1 if receives is not None else 0)
    reason = parameters.mismatch((positional, frozenset(sig.kwargs)))
    if reason is None:
        return
    raise ArgumentsMismatchError(
        what=what[:1].upper() + what[1:],
        task_name=sig.task_name,
        reason=reason,
        signature=f"{public_name(task)}{parameters.shown}",
        receives=f", and it receives {receives} first" if receives else "",
    )


def _parameters_of(task: AsyncTaskiqDecoratedTask[Any, Any]) -> _Parameters | None:
    func = task.original_func
    try:
        return _PARAMETERS[func]
    except KeyError:
        pass
    except TypeError:  # not weakly referable: read each time
        return _read(func)
    found = _PARAMETERS[func] = _read(func)
    return found


def _read(func: Callable[..., Any]) -> _Parameters | None:
    """The parameters a caller passes (``inspect`` follows ``__wrapped__``)."""
    try:
        full = inspect.signature(func, eval_str=True)
    except Exception:  # noqa: BLE001  an annotation that cannot be evaluated
        try:
            full = inspect.signature(func)
        except (TypeError, ValueError):
            return None
    given = [param for param in full.parameters.values() if not _injected(param)]
    plain = [param.replace(annotation=inspect.Parameter.empty) for param in given]
    shown = inspect.Signature(plain)
    return _Parameters(signature=full.replace(parameters=given), shown=str(shown))


def _injected(param: inspect.Parameter) -> bool:
    """Whether taskiq fills this parameter (``TaskiqDepends()``, ``Context``)."""
    if isinstance(param.default, Dependency):
        return True
    metadata: Iterable[object] = getattr(param.annotation, "__metadata__", ())
    return any(isinstance(meta, Dependency) for meta in metadata)
