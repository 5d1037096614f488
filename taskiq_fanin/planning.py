"""Planning a group: validate everything, write the ledger, then dispatch.

Nothing is written until every member, continuation and option has passed its
check (invariant 8), and nothing is dispatched until the ledger is durable
(invariant 1). A caller-supplied group id makes planning idempotent.
"""

import asyncio
import secrets
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic_core import PydanticSerializationError

from taskiq_fanin import metrics
from taskiq_fanin.config import choice, positive
from taskiq_fanin.errors import (
    EmptyGroupError,
    GroupTooWideError,
    InvalidGroupError,
    MemberNotSerializableError,
    UnknownTaskError,
)
from taskiq_fanin.keys import GroupKeys, index_key, validate_group_id
from taskiq_fanin.labels import MemberRef
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
    members: list[Signature]
    ledger: list[str]
    then: Signature | None
    on_error: Signature | None
    policy: FailurePolicy
    sweep_policy: SweepPolicy
    ttl: float
    deadline: float


def _serialize(index: int, member: Signature) -> str:
    try:
        return member.to_ledger()
    except (PydanticSerializationError, TypeError, ValueError) as exc:
        raise MemberNotSerializableError(
            index=index, task_name=member.task_name, reason=str(exc)
        ) from None


def validate_plan(
    fanin: "FanInMiddleware",
    members: Iterable[Signature],
    *,
    then: "TaskRef | Signature | None",
    on_error: "TaskRef | Signature | None",
    group_id: str | None,
    failure_policy: "FailurePolicy | str | None",
    sweep_policy: "SweepPolicy | str | None",
    ttl: float | None,
    deadline: float | None,
) -> GroupPlan:
    """Check a group and serialize its ledger, raising before anything is written."""
    config = fanin.config
    members = list(members)
    if not members:
        raise EmptyGroupError
    if len(members) > config.max_group_size:
        raise GroupTooWideError(size=len(members), maximum=config.max_group_size)
    for index, member in enumerate(members):
        if not isinstance(member, Signature):
            raise InvalidGroupError(
                reason=f"member {index} is a {type(member).__name__}, not a Signature"
            )
    continuations = [
        as_signature(c) if c is not None else None for c in (then, on_error)
    ]
    for sig in [*members, *(c for c in continuations if c is not None)]:
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
        group_id=validate_group_id(group_id)
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
    )


async def plan_group(fanin: "FanInMiddleware", plan: GroupPlan) -> GroupHandle:
    """Write the group's meta and ledger, then dispatch every member."""
    keys = GroupKeys(fanin.config.prefix, plan.group_id)
    now_ms = int(time.time() * 1000)
    deadline_ms = now_ms + int(plan.deadline * 1000)
    # The index may be stale (the sweep prunes it); written first, it never misses
    # a group whose ledger exists.
    await fanin.redis.zadd(index_key(fanin.config.prefix), {plan.group_id: deadline_ms})
    created, token = await fanin.scripts.create_group(
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
        members=plan.ledger,
    )
    if created is Created.EXISTS:
        return GroupHandle(group_id=plan.group_id, created=False, _fanin=fanin)
    await dispatch_members(fanin, plan.group_id, token, dict(enumerate(plan.members)))
    await fanin.scripts.mark_planned(keys, token=token)
    metrics.GROUPS_PLANNED.inc()
    return GroupHandle(group_id=plan.group_id, created=True, _fanin=fanin)


async def dispatch_members(
    fanin: "FanInMiddleware",
    group_id: str,
    token: str,
    members: dict[int, Signature],
) -> None:
    """Kick members with their group label and deterministic task ids.

    Kicking a member twice is harmless: its outcome is recorded once.
    """
    limit = asyncio.Semaphore(fanin.config.dispatch_concurrency)

    async def kick(index: int, member: Signature) -> Any:
        ref = MemberRef(group_id=group_id, index=index, token=token)
        async with limit:
            return await (
                member.with_labels(**ref.label())
                .kicker(fanin.broker)
                .with_task_id(ref.task_id)
                .kiq(*member.args, **member.kwargs)
            )

    await asyncio.gather(*(kick(index, member) for index, member in members.items()))
