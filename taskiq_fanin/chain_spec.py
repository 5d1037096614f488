"""What a chain is: its steps, its travelling cursor, and the checks before writing.

A chain's plan travels with its messages as JSON, so every model here
serializes; a group inside a chain is a ``GroupStep``, a chain inside a group is
a member.
"""

import logging
import uuid
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, TypeAdapter
from pydantic_core import PydanticSerializationError
from taskiq import AsyncBroker

from taskiq_fanin.chain_record import ChainStatus
from taskiq_fanin.errors import (
    EmptyGroupError,
    GroupTooWideError,
    InvalidGroupError,
    MemberNotSerializableError,
    NestingTooDeepError,
    UnknownTaskError,
)
from taskiq_fanin.keys import validate_group_id
from taskiq_fanin.models import FailurePolicy, MemberError, SweepPolicy
from taskiq_fanin.signature import Signature

if TYPE_CHECKING:
    from taskiq_fanin.middleware import FanInMiddleware

logger = logging.getLogger("taskiq_fanin.chains")

#: On a chain step: the ``ChainCursor`` as JSON.
CHAIN_LABEL = "fanin_chain"


def _kind(value: Any) -> str:
    keys = value.keys() if isinstance(value, dict) else type(value).model_fields
    if "steps" in keys:
        return "chain"
    if "members" in keys:
        return "group"
    return "task"


class GroupStep(BaseModel):
    """A group as a chain step (serializable: it travels in the chain's label)."""

    model_config = ConfigDict(frozen=True)

    members: tuple["Member", ...]
    failure_policy: FailurePolicy | None = None
    sweep_policy: SweepPolicy | None = None
    ttl: float | None = None
    deadline: float | None = None
    cancellable: bool = False


class Chain(BaseModel):
    """Steps run one after another, each enqueued by the one before it."""

    model_config = ConfigDict(frozen=True)

    steps: tuple["Step", ...]
    on_error: Signature | None = None
    chain_id: str | None = None

    async def kiq(self, broker: AsyncBroker) -> "ChainHandle":
        """Start the chain on ``broker``: its record, then its first step."""
        from taskiq_fanin.chains import start  # noqa: PLC0415 - cycle
        from taskiq_fanin.middleware import find_fanin  # noqa: PLC0415 - cycle

        fanin = find_fanin(broker)
        chain_id = start_chain_id(self.chain_id)
        await start(fanin, self, chain_id=chain_id, member=None, depth=1)
        return ChainHandle(chain_id=chain_id, _fanin=fanin)


Step = Annotated[
    Annotated[Signature, Tag("task")] | Annotated[GroupStep, Tag("group")],
    Discriminator(_kind),
]
Member = Annotated[
    Annotated[Signature, Tag("task")] | Annotated[Chain, Tag("chain")],
    Discriminator(_kind),
]
GroupStep.model_rebuild()


class ChainHandle(BaseModel):
    """What starting a chain hands back: its id, and a way to ask about it."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    chain_id: str
    fanin: Any = Field(alias="_fanin", exclude=True, repr=False)

    async def status(self) -> ChainStatus:
        """The chain's workflow record now."""
        return await self.fanin.chain_status(self.chain_id)  # type: ignore[no-any-return]


class ChainCursor(BaseModel):
    """Where a message stands in its chain; travels as the ``fanin_chain`` label."""

    id: str
    token: str
    index: int
    rest: tuple[Step, ...] = ()
    on_error: Signature | None = None
    #: When the chain is a group member: the member label to record at its end.
    member: str | None = None
    depth: int = 1
    #: What undoes this step, remembered in the record once the step succeeds.
    undo: Signature | None = None

    def label(self) -> dict[str, str]:
        """The label that carries this cursor."""
        return {CHAIN_LABEL: self.model_dump_json(exclude_defaults=True)}

    @classmethod
    def from_labels(cls, labels: dict[str, Any]) -> "ChainCursor | None":
        """Parse the chain label, or ``None`` if absent or malformed."""
        raw = labels.get(CHAIN_LABEL)
        if not raw:
            return None
        try:
            return cls.model_validate_json(str(raw))
        except ValueError:
            logger.warning("Malformed %s label ignored", CHAIN_LABEL)
            return None


class PendingStep(BaseModel):
    """A step's kick as the record keeps it, so the sweep can make it again."""

    cursor: ChainCursor
    step: Step
    #: The previous step's result (as JSON would carry it); absent for step 0.
    previous: Any = None
    has_previous: bool = False


class ChainFailure(BaseModel):
    """What a chain's error continuation receives."""

    chain_id: str
    step: int
    step_name: str
    error: MemberError


def start_chain_id(chain_id: str | None) -> str:
    """A caller's chain id, checked, or a fresh one."""
    return validate_group_id(chain_id) if chain_id is not None else uuid.uuid4().hex


def step_name(step: "Signature | GroupStep") -> str:
    """How a step shows in the workflow record."""
    if isinstance(step, Signature):
        return step.task_name
    return f"group of {len(step.members)}"


def validate_chain(fanin: "FanInMiddleware", spec: Chain, *, depth: int) -> None:
    """Check a chain before anything is written: steps, tasks, nesting depth."""
    if depth > fanin.config.max_depth:
        raise NestingTooDeepError(depth=depth, maximum=fanin.config.max_depth)
    if not spec.steps:
        raise InvalidGroupError(reason="a chain needs at least one step")
    for step in spec.steps:
        if isinstance(step, Signature):
            _known(fanin, step)
            continue
        _validate_group_step(fanin, step, depth=depth + 1)
    if spec.on_error is not None:
        _known(fanin, spec.on_error)
    try:  # the plan travels as JSON: every argument must serialize, now
        spec.model_dump_json()
    except (PydanticSerializationError, TypeError, ValueError) as exc:
        raise MemberNotSerializableError(
            index=-1, task_name="chain step", reason=str(exc)
        ) from None


def _validate_group_step(
    fanin: "FanInMiddleware", step: GroupStep, *, depth: int
) -> None:
    if depth > fanin.config.max_depth:
        raise NestingTooDeepError(depth=depth, maximum=fanin.config.max_depth)
    if not step.members:
        raise EmptyGroupError
    if len(step.members) > fanin.config.max_group_size:
        raise GroupTooWideError(
            size=len(step.members), maximum=fanin.config.max_group_size
        )
    for member in step.members:
        if isinstance(member, Chain):
            validate_chain(fanin, member, depth=depth + 1)
        else:
            _known(fanin, member)


def _known(fanin: "FanInMiddleware", sig: Signature) -> None:
    for needed in (sig, sig.compensation):
        if needed is not None and fanin.broker.find_task(needed.task_name) is None:
            raise UnknownTaskError(task_name=needed.task_name)


def member_to_ledger(member: "Signature | Chain") -> str:
    """A member as the ledger keeps it: compact JSON."""
    if isinstance(member, Signature):
        return member.to_ledger()
    return member.model_dump_json(by_alias=True, exclude_defaults=True)


_MEMBER_ADAPTER: TypeAdapter[Any] = TypeAdapter(Member)


def member_from_ledger(raw: str | bytes) -> "Signature | Chain":
    """Inverse of :func:`member_to_ledger`."""
    member: Signature | Chain = _MEMBER_ADAPTER.validate_json(raw)
    return member
