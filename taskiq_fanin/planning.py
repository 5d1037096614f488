"""Planning a group: validate everything, write the ledger, then dispatch.

Nothing is written until every member, continuation and option has passed its
check (invariant 8), and nothing is dispatched until the ledger is durable
(invariant 1). A caller-supplied group id makes planning idempotent.
"""

import asyncio
import secrets
import time
import uuid
from collections.abc import Awaitable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pydantic_core import PydanticSerializationError
from redis.asyncio import RedisCluster

from taskiq_fanin import metrics
from taskiq_fanin.chain_spec import (
    Chain,
    member_from_ledger,
    member_to_ledger,
    validate_chain,
)
from taskiq_fanin.chains import start as start_chain
from taskiq_fanin.config import choice, positive
from taskiq_fanin.errors import (
    EmptyGroupError,
    GroupTooWideError,
    InvalidGroupError,
    MemberNotSerializableError,
    NestingTooDeepError,
    UnknownTaskError,
)
from taskiq_fanin.keys import (
    LONGEST_DERIVED_ID,
    LONGEST_ID,
    GroupKeys,
    index_key,
    validate_group_id,
)
from taskiq_fanin.labels import (
    CANCELLABLE_LABEL,
    DEPTH_LABEL,
    MEMBER_LABEL,
    MemberRef,
)
from taskiq_fanin.models import FailurePolicy, GroupStatus, SweepPolicy
from taskiq_fanin.scripts import Created
from taskiq_fanin.signature import Signature, TaskRef, as_signature

if TYPE_CHECKING:
    from taskiq_fanin.middleware import FanInMiddleware


@dataclass(frozen=True)
class GroupHandle:
    """What planning a group hands back: its id, and a way to ask about it."""

    group_id: str
    #: False when a group with this id already existed and nothing was dispatched.
    created: bool
    _fanin: "FanInMiddleware" = field(repr=False, compare=False)

    async def status(self) -> GroupStatus:
        """The group's status as Redis holds it now."""
        return await self._fanin.status(self.group_id)


@dataclass(frozen=True)
class GroupPlan:
    """A validated group, ready to write: every check has passed."""

    group_id: str
    members: list["Signature | Chain"]
    ledger: list[str]
    then: Signature | None
    on_error: Signature | None
    policy: FailurePolicy
    sweep_policy: SweepPolicy
    ttl: float
    deadline: float
    depth: int
    cancellable: bool


def _serialize(index: int, member: "Signature | Chain") -> str:
    try:
        return member_to_ledger(member)
    except (PydanticSerializationError, TypeError, ValueError) as exc:
        name = member.task_name if isinstance(member, Signature) else "chain"
        raise MemberNotSerializableError(
            index=index, task_name=name, reason=str(exc)
        ) from None


def validate_plan(  # noqa: C901 - one check after another, each raising
    fanin: "FanInMiddleware",
    members: Iterable["Signature | Chain"],
    *,
    then: "TaskRef | Signature | None",
    on_error: "TaskRef | Signature | None",
    group_id: str | None,
    failure_policy: "FailurePolicy | str | None",
    sweep_policy: "SweepPolicy | str | None",
    ttl: float | None,
    deadline: float | None,
    depth: int = 1,
    cancellable: bool = False,
) -> GroupPlan:
    """Check a group and serialize its ledger, raising before anything is written."""
    config = fanin.config
    members = list(members)
    if not members:
        raise EmptyGroupError
    if len(members) > config.max_group_size:
        raise GroupTooWideError(size=len(members), maximum=config.max_group_size)
    if depth > config.max_depth:
        raise NestingTooDeepError(depth=depth, maximum=config.max_depth)
    continuations = [
        as_signature(c) if c is not None else None for c in (then, on_error)
    ]
    for index, member in enumerate(members):
        if isinstance(member, Chain):
            validate_chain(fanin, member, depth=depth + 1)
        elif not isinstance(member, Signature):
            raise InvalidGroupError(
                reason=f"member {index} is a {type(member).__name__}, "
                "not a Signature or a chain"
            )
    signatures = [m for m in members if isinstance(m, Signature)]
    for sig in [*signatures, *(c for c in continuations if c is not None)]:
        if fanin.broker.find_task(sig.task_name) is None:
            raise UnknownTaskError(task_name=sig.task_name)
    ttl = positive("ttl", ttl) if ttl is not None else config.ttl
    deadline = (
        positive("deadline", deadline) if deadline is not None else config.deadline
    )
    deadline = min(deadline, ttl)
    ledger = [_serialize(index, member) for index, member in enumerate(members)]
    for continuation in continuations:
        if continuation is not None:
            _serialize(-1, continuation)
    return GroupPlan(
        group_id=validate_group_id(
            group_id, longest=LONGEST_ID if depth == 1 else LONGEST_DERIVED_ID
        )
        if group_id is not None
        else uuid.uuid4().hex,
        members=members,
        ledger=ledger,
        then=continuations[0],
        on_error=continuations[1],
        policy=choice(
            "failure_policy", FailurePolicy, failure_policy or config.failure_policy
        ),
        sweep_policy=choice(
            "sweep_policy", SweepPolicy, sweep_policy or config.sweep_policy
        ),
        ttl=ttl,
        deadline=deadline,
        depth=depth,
        cancellable=cancellable,
    )


async def plan_group(fanin: "FanInMiddleware", plan: GroupPlan) -> GroupHandle:
    """Write the group's meta and ledger, then dispatch every member."""
    keys = GroupKeys(fanin.config.prefix, plan.group_id)
    now_ms = int(time.time() * 1000)
    deadline_ms = now_ms + int(plan.deadline * 1000)

    def index() -> Awaitable[object]:
        return fanin.scripts.send(
            lambda pipe: pipe.zadd(
                index_key(fanin.config.prefix), {plan.group_id: deadline_ms}, nx=True
            )
        )

    def create() -> Awaitable[tuple[Created, str]]:
        return fanin.scripts.create_group(
            keys,
            token=secrets.token_hex(8),
            now_ms=now_ms,
            deadline_ms=deadline_ms,
            expires_ms=now_ms + int(plan.ttl * 1000),
            then=plan.then.to_ledger() if plan.then else "",
            on_error=plan.on_error.to_ledger() if plan.on_error else "",
            policy=plan.policy.value,
            sweep_policy=plan.sweep_policy.value,
            span_ms=int(plan.deadline * 1000),
            depth=plan.depth,
            cancellable=plan.cancellable,
            members=plan.ledger,
            planner_lease_ms=int(fanin.config.lease * 1000),
        )

    # The index may be stale (the sweep prunes it), but it must never miss a
    # group whose ledger exists: it is written first. On one server both go in
    # one pipeline, which Redis runs in order; a cluster may run them on two
    # nodes in any order, so there the index is written before the ledger.
    if isinstance(fanin.redis, RedisCluster):
        await index()
        created, token = await create()
    else:
        indexed, made = await asyncio.gather(index(), create(), return_exceptions=True)
        if isinstance(indexed, BaseException):
            # Refused, while the ledger may be written: once more, alone (it
            # raises if refused again), so that no ledger stays out of the index.
            await index()
        if isinstance(made, BaseException):
            raise made
        created, token = made
    if created is Created.EXISTS:
        return GroupHandle(group_id=plan.group_id, created=False, _fanin=fanin)
    if created is Created.EXISTS_UNPLANNED:
        # An earlier planner died mid-dispatch: finish its work from the ledger.
        members = await _undispatched(fanin, keys)
    else:
        members = dict(enumerate(plan.members))
    await dispatch_members(
        fanin,
        plan.group_id,
        token,
        members,
        depth=plan.depth,
        cancellable=plan.cancellable,
    )
    await fanin.scripts.mark_planned(keys, token=token)
    metrics.GROUPS_PLANNED.inc()
    return GroupHandle(
        group_id=plan.group_id, created=created is Created.CREATED, _fanin=fanin
    )


async def _undispatched(
    fanin: "FanInMiddleware", keys: GroupKeys
) -> dict[int, "Signature | Chain"]:
    """Members in the ledger that have no outcome yet (kicking one twice is safe)."""
    inspected = await fanin.scripts.inspect_group(keys)
    if inspected is None or not inspected.missing:
        return {}
    entries = await fanin.redis.hmget(keys.plan, [str(i) for i in inspected.missing])
    return {
        index: member_from_ledger(entry)
        for index, entry in zip(inspected.missing, entries, strict=True)
        if entry is not None
    }


async def dispatch_members(
    fanin: "FanInMiddleware",
    group_id: str,
    token: str,
    members: dict[int, "Signature | Chain"],
    *,
    depth: int,
    cancellable: bool = False,
    attempt: int = 0,
) -> None:
    """Kick members with their group label and deterministic task ids.

    Kicking a member twice is harmless: its outcome is recorded once. A member
    that is a chain starts under the id ``<group>.<index>`` (``.r<attempt>`` added
    when the sweep re-drives it: a re-driven chain starts over).
    """
    limit = asyncio.Semaphore(fanin.config.dispatch_concurrency)
    labels = {DEPTH_LABEL: str(depth)}
    if cancellable:
        labels[CANCELLABLE_LABEL] = "1"

    async def kick(index: int, member: "Signature | Chain") -> None:
        ref = MemberRef(group_id=group_id, index=index, token=token)
        async with limit:
            if isinstance(member, Chain):
                chain_id = ref.task_id + (f".r{attempt}" if attempt else "")
                await start_chain(
                    fanin,
                    member,
                    chain_id=chain_id,
                    member=ref.label()[MEMBER_LABEL],
                    depth=depth + 1,
                )
                return
            await (
                member.with_labels(**ref.label(), **labels)
                .kicker(fanin.kicking_broker)
                .with_task_id(ref.task_id)
                .kiq(*member.args, **member.kwargs)
            )

    await asyncio.gather(*(kick(index, member) for index, member in members.items()))
