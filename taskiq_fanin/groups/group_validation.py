"""Checks of a group before anything is written, and the checks chains share.

A group planned directly, returned by a ``@group_task`` body, or run as a
chain's step is checked by :func:`validate_group`. A member that is a chain is
checked through the context's ``check_chain`` port, by the chain engine
(``chains/chain_validation.py``), which checks its tasks and sizes with
:func:`check_task` and :func:`serialized`. Nothing is written until all of it
has passed (invariant 8).
"""

import difflib
import secrets
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

from pydantic_core import PydanticSerializationError

from taskiq_fanin.context import FanInContext
from taskiq_fanin.domain.exceptions import (
    GroupTooWideError,
    MemberNotSerializableError,
    MemberTooLargeError,
    NestingTooDeepError,
    UnknownTaskError,
)
from taskiq_fanin.domain.options import ResolvedGroupOptions
from taskiq_fanin.domain.signature import Signature
from taskiq_fanin.domain.spec import ChainSpec, GroupSpec, member_to_ledger
from taskiq_fanin.groups.arguments import check_arguments
from taskiq_fanin.storage.keys import validate_group_id

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
    #: Members from an iterator: checked and written a chunk at a time
    #: (``groups/ledger.py``); ``members`` and ``ledger`` are then empty.
    stream: AsyncIterator[Signature | ChainSpec] | None = None
    #: Its id is the caller's own (not one the library derived, not a chain's
    #: group step): planned again with other members, it is refused.
    named_by_caller: bool = False


def validate_group(
    ctx: FanInContext,
    spec: GroupSpec,
    *,
    depth: int = 1,
    token: str | None = None,
    chain_step: bool = False,
    derived_id: bool = False,
    stream: AsyncIterator[Signature | ChainSpec] | None = None,
    named_by_caller: bool | None = None,
) -> GroupPlan:
    """Check a group and serialize its ledger, raising before anything is written.

    ``token``: the group's, when a planner that may retry chose it (planning
    again with it goes on dispatching); a fresh one otherwise. ``chain_step``:
    the continuations are the chain's own, carrying the rest of its plan (checked
    when it started), not held to ``max_member_bytes``. ``derived_id``: the
    library derived the group's id (a chain's step, a ``@group_task`` member):
    it is checked as such; a caller's id may not look like one. ``stream``:
    members from an iterator (``spec.members`` empty), checked chunk by chunk
    as they are written, by :func:`checked_member`. ``named_by_caller``: the
    id is the caller's own (default: given, and neither derived nor a chain
    step's); only such a group is refused when planned again with others.
    """
    check_group(ctx, spec, depth=depth)
    limit = ctx.config.max_member_bytes
    ledger = tuple(
        serialized(f"member {index}", member, limit)
        for index, member in enumerate(spec.members)
    )
    options = spec.options.with_defaults(ctx.config)
    most = options.max_in_flight
    if (
        stream is None
        and not options.open
        and most is not None
        and most >= len(spec.members)
    ):
        # As wide as the group: no window at all (nothing released, no deadline
        # sliding). A streamed or open group's size is known only later.
        options = options.model_copy(update={"max_in_flight": None})
    for name, continuation in (("then", options.then), ("on_error", options.on_error)):
        if continuation is not None:
            what = f"the continuation {name}"
            serialized(what, continuation, None if chain_step else limit)
    return GroupPlan(
        group_id=validate_group_id(spec.group_id, derived=derived_id)
        if spec.group_id is not None
        else uuid.uuid4().hex,
        members=spec.members,
        ledger=ledger,
        options=options,
        depth=depth,
        token=token or secrets.token_hex(8),
        stream=stream,
        named_by_caller=spec.group_id is not None and not (derived_id or chain_step)
        if named_by_caller is None
        else named_by_caller,
    )


#: What a chain step after the first receives before its own arguments.
PREVIOUS = "the previous step's result (Signature.immutable() opts out)"


def check_group(
    ctx: FanInContext,
    spec: GroupSpec,
    *,
    depth: int,
    after_previous: bool = False,
    bind: bool = True,
    within: str = "",
) -> None:
    """Width, depth, tasks and arguments of a group's members and continuations.

    ``after_previous``: the group is a chain step after a previous one, whose
    result its members receive first.
    """
    config = ctx.config
    if depth > config.max_depth:
        raise NestingTooDeepError(depth=depth, maximum=config.max_depth)
    if len(spec.members) > config.max_group_size:
        raise GroupTooWideError(size=len(spec.members), maximum=config.max_group_size)
    for number, member in enumerate(spec.members):
        check_member(
            ctx,
            member,
            f"member {number}{within}",
            depth=depth,
            after_previous=after_previous,
            bind=bind,
        )
    for name, continuation in (
        ("then", spec.options.then),
        ("on_error", spec.options.on_error),
    ):
        if continuation is not None:
            what = f"the continuation {name}{within}"
            check_task(ctx, what, continuation, "the GroupResult", bind=bind)


def check_member(
    ctx: FanInContext,
    member: Signature | ChainSpec,
    what: str,
    *,
    depth: int,
    after_previous: bool = False,
    bind: bool = True,
) -> None:
    """One member's tasks and arguments (a chain's through ``check_chain``)."""
    if isinstance(member, ChainSpec):
        ctx.check_chain(
            ctx,
            member,
            depth=depth + 1,
            after_previous=after_previous,
            checked=not bind,
            within=f" in {what}",
        )
        return
    receives = PREVIOUS if after_previous and member.pass_result else None
    check_task(ctx, what, member, receives, bind=bind)


def checked_member(
    ctx: FanInContext, member: Signature | ChainSpec, number: int, *, depth: int
) -> str:
    """A streamed member checked as ``validate_group`` checks a listed one.

    Returns its ledger entry; raises the same typed errors.
    """
    if number >= ctx.config.max_group_size:
        raise GroupTooWideError(size=number + 1, maximum=ctx.config.max_group_size)
    what = f"member {number}"
    check_member(ctx, member, what, depth=depth)
    return serialized(what, member, ctx.config.max_member_bytes)


def unknown_task(ctx: FanInContext, task_name: str, what: str) -> UnknownTaskError:
    """What a name the broker does not know is told: the names it may have meant."""
    known = list(ctx.broker.get_all_tasks())
    near = difflib.get_close_matches(task_name, known, n=3, cutoff=0.85)
    if near:
        fix = "did you mean " + " or ".join(repr(name) for name in near) + "?"
    else:
        fix = (
            "decorate it with @broker.task on this broker, and import its module "
            "where the group or chain is planned and in the worker; taskiq names "
            "a task 'module:function'"
        )
    return UnknownTaskError(task_name=task_name, what=what, fix=fix)


def check_task(
    ctx: FanInContext, what: str, sig: Signature, receives: str | None, *, bind: bool
) -> None:
    """The broker knows the task (and its compensation's); its arguments fit it."""
    task = ctx.find_task(sig.task_name)
    if task is None:
        raise unknown_task(ctx, sig.task_name, what)
    undo = sig.compensation
    if undo is not None and not ctx.knows_task(undo.task_name):
        raise unknown_task(ctx, undo.task_name, f"the compensation of {what}")
    if bind:
        check_arguments(task, what, sig, receives=receives)


def serialized(what: str, member: Signature | ChainSpec, limit: int | None) -> str:
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
