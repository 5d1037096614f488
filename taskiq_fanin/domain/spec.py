"""What groups and chains are, as data: they nest, and they serialize.

A chain's plan travels with its messages as JSON and a group's members wait in
its ledger as JSON, so every model here serializes. A group may be a step of a
chain; a chain may be a member of a group.
"""

from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    TypeAdapter,
)

from taskiq_fanin.domain.options import MAX_NAME, MAX_VERSION, GroupOptions
from taskiq_fanin.domain.signature import Signature


def _kind(value: Any) -> str:
    keys = value.keys() if isinstance(value, dict) else type(value).model_fields
    if "steps" in keys:
        return "chain"
    if "members" in keys:
        return "group"
    return "task"


class GroupSpec(BaseModel):
    """Members, and the options that say what runs once they all have an outcome."""

    model_config = ConfigDict(frozen=True)

    members: "tuple[Member, ...]"
    options: GroupOptions = GroupOptions()
    #: Makes planning idempotent; ``None`` plans under a fresh id.
    group_id: str | None = None


class ChainSpec(BaseModel):
    """Steps run one after another, each enqueued by the one before it."""

    model_config = ConfigDict(frozen=True)

    steps: "tuple[Step, ...]"
    #: Receives a ``ChainFailure`` when a step fails for good.
    on_error: Signature | None = None
    chain_id: str | None = None
    #: Go on past a step that fails for good (its failure recorded) instead of
    #: stopping: how compensations run, each attempted whatever came before.
    keep_going: bool = False
    #: Which version of the code started it, kept on its record, shown by its
    #: status and counted by ``taskiq-fanin list --chains``.
    version: str | None = Field(default=None, min_length=1, max_length=MAX_VERSION)
    #: What kind of workflow it is: kept on its record, shown by its status, the
    #: ``workflow`` label of its metrics (``None``: its first step's task name).
    name: str | None = Field(default=None, min_length=1, max_length=MAX_NAME)


#: A step of a chain: a task, or a group whose continuation is the next step.
Step = Annotated[
    Annotated[Signature, Tag("task")] | Annotated[GroupSpec, Tag("group")],
    Discriminator(_kind),
]
#: A member of a group: a task, or a chain that counts once its last step ends.
Member = Annotated[
    Annotated[Signature, Tag("task")] | Annotated[ChainSpec, Tag("chain")],
    Discriminator(_kind),
]
GroupSpec.model_rebuild()
ChainSpec.model_rebuild()

_MEMBER_ADAPTER: TypeAdapter[Signature | ChainSpec] = TypeAdapter(Member)


def member_to_ledger(member: Signature | ChainSpec) -> str:
    """A member as the ledger keeps it: compact JSON."""
    if isinstance(member, Signature):
        return member.to_ledger()
    return member.model_dump_json(by_alias=True, exclude_defaults=True)


def member_from_ledger(raw: str | bytes) -> Signature | ChainSpec:
    """Inverse of :func:`member_to_ledger`."""
    return _MEMBER_ADAPTER.validate_json(raw)


#: How a group step's name begins in a chain's workflow record.
GROUP_STEP_NAME = "group of "


def step_name(step: Signature | GroupSpec) -> str:
    """How a step shows in the chain's workflow record."""
    if isinstance(step, Signature):
        return step.task_name
    return f"{GROUP_STEP_NAME}{len(step.members)}"


#: The name of a group or a chain with no task to be named after (an empty group).
UNNAMED = "unnamed"


def member_name(member: "Signature | ChainSpec | GroupSpec") -> str:
    """The name a workflow is given after this member or step when it has none.

    A task: its name; a chain: its own name, else its first step's; a group:
    its own name, else its continuation's task name, else its first member's.
    """
    if isinstance(member, Signature):
        return member.task_name
    if isinstance(member, ChainSpec):
        return chain_name(member)
    first = member.members[0] if member.members else None
    return group_name(member.options, first)


def group_name(options: GroupOptions, first: "Signature | ChainSpec | None") -> str:
    """A group's workflow name: its ``name``, else its continuation's task name.

    With neither, its first member's (:func:`member_name`).
    """
    if options.name is not None:
        return options.name
    if options.then is not None:
        return options.then.task_name
    return member_name(first) if first is not None else UNNAMED


def chain_name(spec: ChainSpec) -> str:
    """A chain's workflow name: its ``name``, else its first step's."""
    if spec.name is not None:
        return spec.name
    return member_name(spec.steps[0]) if spec.steps else UNNAMED


def named_steps(spec: ChainSpec) -> ChainSpec:
    """The chain with its name resolved, given to each group step that has none.

    A group step's continuations are the chain's own: the chain's name says
    what it is part of.
    """
    name = chain_name(spec)
    steps = tuple(
        step.model_copy(
            update={"options": step.options.model_copy(update={"name": name})}
        )
        if isinstance(step, GroupSpec) and step.options.name is None
        else step
        for step in spec.steps
    )
    return spec.model_copy(update={"name": name, "steps": steps})
