"""The options of one group: one value, from the caller's hands to the ledger.

Every way of planning a group (``group(...)``, a ``@group_task`` body, a chain's
group step) carries one :class:`GroupOptions`. Nothing copies its fields one by
one, so an option added here reaches the ledger on every path.
"""

from collections.abc import Mapping
from datetime import timedelta
from typing import Annotated, Any, TypedDict

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from taskiq_fanin.domain.config import FanInConfig, check_lifetime
from taskiq_fanin.domain.exceptions import InvalidOptionError, shown
from taskiq_fanin.domain.results import FailurePolicy, SweepPolicy
from taskiq_fanin.domain.signature import Signature, TaskRef, as_signature


def _in_seconds(value: Any) -> Any:
    return value.total_seconds() if isinstance(value, timedelta) else value


#: A duration: seconds, or a ``timedelta``; kept in seconds.
Seconds = Annotated[float, BeforeValidator(_in_seconds), Field(gt=0)]


#: The longest ``version`` a group or a chain may carry.
MAX_VERSION = 64
#: The longest ``name`` a group or a chain may carry: a metrics label, so a
#: few distinct names per application, never an id.
MAX_NAME = 64


class GroupOptions(BaseModel):
    """How one group behaves; an option left ``None`` takes the middleware's."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: Receives the ``GroupResult`` once every member has an outcome.
    then: Signature | None = None
    #: Under failure policy ``fail``, runs instead of ``then`` if a member failed.
    on_error: Signature | None = None
    #: What failed members mean for the continuation.
    failure_policy: FailurePolicy | None = None
    #: What the sweep does with the group if it is still open past its deadline.
    sweep_policy: SweepPolicy | None = None
    #: How long every key of the group lives, finished or not (seconds, or a
    #: ``timedelta``).
    ttl: Seconds | None = None
    #: After how long a group still open is stuck (seconds, or a ``timedelta``).
    deadline: Seconds | None = None
    #: Members check for cancellation before they run (one Redis read each).
    cancellable: bool = False
    #: A group of more members hands its continuation a ``GroupResult`` by
    #: reference: counts only, its results read with ``iter_results()``.
    results_inline_max: int | None = Field(default=None, gt=0)
    #: At most this many members are queued or running at once: the planner
    #: kicks the first ones, and each recorded outcome kicks the next
    #: (``None``: every member is kicked at planning).
    max_in_flight: int | None = Field(default=None, gt=0, strict=True)
    #: Members are added after planning (``handle.add``) until ``handle.seal()``
    #: fixes the total: the continuation waits for the seal.
    open: bool = Field(default=False, strict=True)
    #: Which version of the code planned it, kept on its record and shown by
    #: its status (an operator sees when an old handler may be removed).
    version: str | None = Field(default=None, min_length=1, max_length=MAX_VERSION)
    #: What kind of workflow it is, kept on its record, shown by its status and
    #: the ``workflow`` label of its metrics (``None``: the continuation's task
    #: name, else the first member's). A label: a few per application, no ids.
    name: str | None = Field(
        default=None, min_length=1, max_length=MAX_NAME, strict=True
    )

    @field_validator("then", "on_error", mode="before")
    @classmethod
    def _as_signature(cls, value: Any) -> Any:
        """A task or a task's name stands for its signature without arguments."""
        if value is None or isinstance(value, Signature | dict):
            return value
        return as_signature(value)

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> "GroupOptions":
        """Options from keyword arguments, or a typed error naming the bad one."""
        try:
            return cls.model_validate(dict(options))
        except ValidationError as exc:
            first = exc.errors()[0]
            name = ".".join(str(part) for part in first["loc"]) or "options"
            raise InvalidOptionError(
                name=name, value=shown(first.get("input")), reason=first["msg"]
            ) from None

    def overridden_by(self, other: "GroupOptions") -> "GroupOptions":
        """These options, with every option ``other`` set explicitly instead."""
        return self.model_copy(
            update={name: getattr(other, name) for name in other.model_fields_set}
        )

    def with_defaults(self, config: FanInConfig) -> "ResolvedGroupOptions":
        """Every option resolved: the middleware's defaults fill the gaps.

        A group whose keys would expire before the sweep could act on it (a
        ``ttl`` shorter than its deadline plus the finaliser lease) is refused.
        """
        values = dict(self)
        ttl, deadline = self.ttl or config.ttl, self.deadline or config.deadline
        check_lifetime(ttl, deadline, config.finaliser_lease)
        values.update(
            failure_policy=self.failure_policy or config.failure_policy,
            sweep_policy=self.sweep_policy or config.sweep_policy,
            ttl=ttl,
            deadline=deadline,
            results_inline_max=self.results_inline_max or config.results_inline_max,
        )
        return ResolvedGroupOptions(**values)


class ResolvedGroupOptions(GroupOptions):
    """A group's options with every default filled in, as planning writes them."""

    failure_policy: FailurePolicy
    sweep_policy: SweepPolicy
    ttl: float
    deadline: float
    results_inline_max: int


class GroupOptionsArgs(TypedDict, total=False):
    """The options of :class:`GroupOptions` as keyword arguments (for typing)."""

    then: TaskRef | Signature | None
    on_error: TaskRef | Signature | None
    failure_policy: FailurePolicy | str | None
    sweep_policy: SweepPolicy | str | None
    ttl: float | timedelta | None
    deadline: float | timedelta | None
    cancellable: bool
    results_inline_max: int | None
    max_in_flight: int | None
    open: bool
    version: str | None
    name: str | None
