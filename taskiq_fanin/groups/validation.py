"""Checks before anything is written: one validation of groups and chains.

A group planned directly, returned by a ``@group_task`` body, or run as a
chain's step is checked by :func:`validate_group`, and every chain (on its own,
as a group's member) by :func:`validate_chain`. Nothing is written until all of
it has passed (invariant 8).
"""

import secrets
import uuid
from dataclasses import dataclass

from pydantic_core import PydanticSerializationError

from taskiq_fanin.context import FanInContext
from taskiq_fanin.model.errors import (
    GroupTooWideError,
    InvalidGroupError,
    MemberNotSerializableError,
    MemberTooLargeError,
    NestingTooDeepError,
    UnknownTaskError,
)
from taskiq_fanin.model.options import ResolvedGroupOptions
from taskiq_fanin.model.signature import Signature
from taskiq_fanin.model.spec import ChainSpec, GroupSpec, member_to_ledger
from taskiq_fanin.store.keys import validate_group_id

#: What cannot be serialized raises one of these.
_NOT_SERIALIZABLE = (PydanticSerializationError, TypeError, ValueError)


@dataclass(frozen=True)
class GroupPlan:
    """A group that passed every check, ready to write."""

    group_id: str
    members: tuple[Signature | ChainSpec, ...]
    #: Each member as the ledger keeps it.
    ledger: tuple[str, ...]
    #: Every option resolved (the middleware's defaults filled in).
    options: ResolvedGroupOptions
    #: How deep the group sits in groups and chains (1: at the top).
    depth: int
    #: The token its members carry; a planner retrying passes its own again.
    token: str


def validate_group(
    ctx: FanInContext,
    spec: GroupSpec,
    *,
    depth: int = 1,
    token: str | None = None,
    chain_step: bool = False,
    derived_id: bool = False,
) -> GroupPlan:
    """Check a group and serialize its ledger, raising before anything is written.

    ``token``: the group's, when a planner that may retry chose it (planning
    again with it goes on dispatching); a fresh one otherwise. ``chain_step``:
    the continuations are the chain's own, carrying the rest of its plan (checked
    when it started), not held to ``max_member_bytes``. ``derived_id``: the
    library derived the group's id (a chain's step, a ``@group_task`` member):
    it is checked as such; a caller's id may not look like one.
    """
    _check_group(ctx, spec, depth=depth)
    limit = ctx.config.max_member_bytes
    ledger = tuple(
        _serialized(f"member {index}", member, limit)
        for index, member in enumerate(spec.members)
    )
    options = spec.options.with_defaults(ctx.config)
    for name, continuation in (("then", options.then), ("on_error", options.on_error)):
        if continuation is not None:
            what = f"the continuation {name}"
            _serialized(what, continuation, None if chain_step else limit)
    return GroupPlan(
        group_id=validate_group_id(spec.group_id, derived=derived_id)
        if spec.group_id is not None
        else uuid.uuid4().hex,
        members=spec.members,
        ledger=ledger,
        options=options,
        depth=depth,
        token=token or secrets.token_hex(8),
    )


def validate_chain(ctx: FanInContext, spec: ChainSpec, *, depth: int) -> None:
    """Check a chain before anything is written: steps, tasks, nesting depth."""
    if depth > ctx.config.max_depth:
        raise NestingTooDeepError(depth=depth, maximum=ctx.config.max_depth)
    if not spec.steps:
        raise InvalidGroupError(reason="a chain needs at least one step")
    for index, step in enumerate(spec.steps):
        if isinstance(step, GroupSpec):
            set_here = (step.options.then, step.options.on_error, step.group_id)
            if any(value is not None for value in set_here):
                raise InvalidGroupError(
                    reason=f"step {index}, a group inside a chain, takes no then, "
                    "on_error or group_id: the next step is its continuation"
                )
            _check_group(ctx, step, depth=depth + 1)
        else:
            _known(ctx, step)
    if spec.on_error is not None:
        _known(ctx, spec.on_error)
    _serialize_chain(spec, ctx.config.max_member_bytes)


def _serialize_chain(spec: ChainSpec, limit: int) -> None:
    """Every argument serializes, now: the plan travels as JSON.

    A group step's members fit the ledger too (before a previous result joins).
    """
    for index, step in enumerate(spec.steps):
        if isinstance(step, Signature):
            _serialized(f"step {index} of the chain", step, None)
            continue
        for number, member in enumerate(step.members):
            _serialized(f"member {number} of step {index}", member, limit)
    if spec.on_error is not None:
        _serialized("the chain's on_error", spec.on_error, None)


def validate_kick(what: str, step: Signature) -> None:
    """Check that a task step, with the arguments it is about to get, serializes."""
    _serialized(what, step, None)


def _check_group(ctx: FanInContext, spec: GroupSpec, *, depth: int) -> None:
    config = ctx.config
    if depth > config.max_depth:
        raise NestingTooDeepError(depth=depth, maximum=config.max_depth)
    if len(spec.members) > config.max_group_size:
        raise GroupTooWideError(size=len(spec.members), maximum=config.max_group_size)
    for member in spec.members:
        if isinstance(member, ChainSpec):
            validate_chain(ctx, member, depth=depth + 1)
        else:
            _known(ctx, member)
    for continuation in (spec.options.then, spec.options.on_error):
        if continuation is not None:
            _known(ctx, continuation)


def _known(ctx: FanInContext, sig: Signature) -> None:
    for needed in (sig, sig.compensation):
        if needed is not None and not ctx.knows_task(needed.task_name):
            raise UnknownTaskError(task_name=needed.task_name)


def _serialized(what: str, member: Signature | ChainSpec, limit: int | None) -> str:
    """``member`` as the ledger keeps it, or a typed error naming ``what``."""
    name = member.task_name if isinstance(member, Signature) else "a chain"
    what = what[:1].upper() + what[1:]
    try:
        entry = member_to_ledger(member)
    except _NOT_SERIALIZABLE as exc:
        reason = str(exc).splitlines()[0][:200]
        raise MemberNotSerializableError(
            what=what, task_name=name, reason=reason
        ) from None
    if limit is not None and len(entry) > limit:
        raise MemberTooLargeError(
            what=what, task_name=name, size=len(entry), maximum=limit
        )
    return entry
