"""``group(...)``: a group described, then planned and dispatched on a broker."""

import hashlib
import logging
import secrets
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import PrivateAttr
from taskiq import AsyncTaskiqTask

from taskiq_fanin.api.broker import Target, context_of
from taskiq_fanin.api.checks import wrong_kind
from taskiq_fanin.api.retries import cancel_group_riding, riding
from taskiq_fanin.context import FanInContext, current_run, run_additions
from taskiq_fanin.domain.exceptions import InvalidGroupError
from taskiq_fanin.domain.options import GroupOptions
from taskiq_fanin.domain.results import GroupStatus
from taskiq_fanin.domain.signature import Signature
from taskiq_fanin.domain.spec import ChainSpec, GroupSpec
from taskiq_fanin.domain.watching import GroupProgress, MemberOutcome
from taskiq_fanin.groups import growing, ledger, outcome_follower, pace, reading
from taskiq_fanin.groups.group_validation import GroupPlan, validate_group
from taskiq_fanin.groups.planning import Planned, plan_group
from taskiq_fanin.storage.keys import validate_group_id

logger = logging.getLogger("taskiq_fanin")

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from taskiq_fanin.domain.options import GroupOptionsArgs


@dataclass(frozen=True)
class GroupHandle:
    """What planning a group hands back: its id, its status, a way to cancel it.

    Of a group planned with ``open=True``: ``add`` members, then ``seal`` it.
    """

    group_id: str
    #: False when a group with this id already existed and nothing was
    #: dispatched; ``None`` for the group of a ``@group_task`` kick.
    created: bool | None
    _ctx: FanInContext = field(repr=False, compare=False)

    async def status(self) -> GroupStatus:
        """The group's status as Redis holds it now."""
        return await reading.status(self._ctx, self.group_id)

    async def progress(self) -> GroupProgress:
        """Its counts, its rate and the time it has left (O(1) in its size)."""
        return await pace.group_progress(self._ctx, self.group_id)

    def outcomes(self, *, after: str | None = None) -> AsyncIterator[MemberOutcome]:
        """Each member's outcome as it is recorded, until the group ends.

        ``async for outcome in handle.outcomes(): ...``. From the start (a
        reader that comes late reads what came before it first), or after an
        outcome's ``cursor``. The group's outcome stream keeps its latest
        ``outcome_stream_max`` outcomes. Raises ``GroupNotFoundError`` when
        Redis holds no such group.
        """
        return outcome_follower.follow(self._ctx, self.group_id, after=after)

    async def cancel(self) -> bool:
        """Cancel this group (as ``cancel(broker, id)``); False if it is not open.

        No continuation runs; members already enqueued still run, unless the
        group was planned with ``cancellable=True``.
        """
        return await cancel_group_riding(self._ctx, self.group_id)

    async def add(self, members: Iterable[Signature | ChainSpec]) -> range:
        """Add members to this group, planned with ``open=True`` and not sealed.

        They are checked (a bad one raises before anything is written),
        written to the group's ledger after the members it holds, then kicked
        (of a windowed group, those its window reaches now; its outcomes
        release the rest). Returns their indexes, in the order given. Safe
        from a client or from a member's body (``group_handle(broker,
        group_id)``); while Redis is away it is tried again, never adding a
        member twice. Inside a task body, the body's n-th addition to a group
        is one batch whatever the copy of its message that runs it (taskiq
        delivers at least once, a retry runs it again): it adds its members
        once. A sealed group, or one planned without ``open=True``, raises
        ``GroupSealedError``; a group Redis does not hold,
        ``GroupNotFoundError``.
        """
        listed = _listed(members)
        ctx, batch = self._ctx, _batch_of(self.group_id)
        return await riding(
            ctx,
            lambda: growing.add_members(ctx, self.group_id, listed, batch=batch),
            what=("Adding to group", self.group_id),
        )

    async def seal(self) -> int:
        """Fix the total of this open group: no member is added after. Its total.

        The continuation runs once every member has an outcome: at once, if
        each has one already. Sealing again, or a group planned without
        ``open=True``, changes nothing; a group Redis does not hold raises
        ``GroupNotFoundError``.
        """
        ctx = self._ctx
        claimant = growing.seal_claimant(secrets.token_hex(8))
        return await riding(
            ctx,
            lambda: growing.seal_group(ctx, self.group_id, claimant=claimant),
            what=("Sealing group", self.group_id),
        )


def _batch_of(group_id: str) -> str:
    """An addition's batch id: the same for each copy of a running message."""
    running, counts = current_run.get(), run_additions.get()
    if running is None or counts is None:
        return secrets.token_hex(8)
    number = counts.get(group_id, 0)
    counts[group_id] = number + 1
    seed = f"{running[1].task_id}\n{group_id}\n{number}".encode()
    return hashlib.blake2b(seed, digest_size=8).hexdigest()


def group_handle(target: Target, kicked: AsyncTaskiqTask[Any] | str) -> GroupHandle:
    """The group a ``@group_task`` kick plans: its id is the kick's task id.

    ``handle = group_handle(broker, await make_album.kiq(7))``. Its ``status()``
    says ``missing`` until the fan-out task has run and planned the group. An
    id that cannot name a group raises ``InvalidGroupIdError`` here.
    """
    group_id = kicked if isinstance(kicked, str) else kicked.task_id
    validate_group_id(group_id, derived=True)
    return GroupHandle(group_id, None, context_of(target))


class Group(GroupSpec):
    """A group not yet planned: members, and what runs when they all have an outcome.

    Build one with :func:`group`; plan and dispatch it with ``await g.kiq(broker)``,
    return it from a ``@group_task`` body (to give the continuation arguments
    known only at run time), or make it a step of a ``chain(...)``.
    """

    #: Members from an iterator, read a chunk at a time as they are planned.
    _stream: AsyncIterator[Signature | ChainSpec] | None = PrivateAttr(default=None)
    #: A streamed group was kicked: its iterator is read, and cannot be again.
    _kicked: bool = PrivateAttr(default=False)

    @property
    def streamed(self) -> bool:
        """Its members come from an iterator (planned once, a chunk at a time)."""
        return self._stream is not None

    @property
    def stream(self) -> AsyncIterator[Signature | ChainSpec] | None:
        """The iterator its members come from, or ``None`` for listed members."""
        return self._stream

    async def kiq(self, broker: Target) -> GroupHandle:
        """Plan the group on ``broker`` and dispatch its members; returns at once.

        Bad input raises a ``FanInError`` before anything is kicked: before
        anything is written for listed members; for members from an iterator,
        before the chunk holding the bad one is written, the chunks written
        before it being removed again. While Redis (or the broker's) is away,
        planning is tried again with the same id and token, for the
        middleware's ``retry_for``, then the error is raised.
        """
        ctx = context_of(broker)
        if self.streamed:
            if self._kicked:
                raise InvalidGroupError(
                    reason="its members come from an iterator, which its first "
                    "kiq() read: build the group again (group(members, ...)) to "
                    "plan it again"
                )
            self._kicked = True
        plan = validate_group(ctx, self, stream=self.stream)
        if plan.stream is None:
            # Tried again while Redis is away, with the same id and token, its
            # whole ledger written again (Redis may have lost the group).
            planned = await riding(
                ctx,
                lambda: plan_group(ctx, plan, retried=True),
                what=("Planning group", plan.group_id),
            )
        else:
            planned = await _plan_streamed(ctx, plan)
        return GroupHandle(planned.group_id, planned.created, ctx)


async def _plan_streamed(ctx: FanInContext, plan: GroupPlan) -> Planned:
    """Plan a streamed group, tried again while Redis is away: its chunks replayed.

    What the caller's iterator raised is raised, never retried: over a
    Redis error met while taking back what was written (logged).
    """
    chunks = ledger.Replay(ctx, plan)
    try:
        return await riding(
            ctx,
            lambda: plan_group(ctx, plan, chunks=chunks.attempt(), retried=True),
            what=("Planning group", plan.group_id),
            final=lambda error: error is chunks.failure,
        )
    except Exception as error:
        failure = chunks.failure
        if failure is None or error is failure:
            raise
        logger.warning(
            "Group %s: its members' iterator raised (%r); what was written of "
            "it was not taken back: %s",
            plan.group_id,
            failure,
            error,
        )
    finally:
        await _closed(chunks, plan.group_id)
    raise failure


async def _closed(chunks: ledger.Replay, group_id: str) -> None:
    """The iterator closed; its own cleanup raising is logged, not raised.

    It would hide the plan's outcome or error.
    """
    try:
        await chunks.aclose()
    except Exception:
        logger.warning(
            "Group %s: closing its members' iterator raised", group_id, exc_info=True
        )


Members = Iterable[Signature | ChainSpec] | AsyncIterable[Signature | ChainSpec]


def group(
    members: Members,
    *,
    group_id: str | None = None,
    **options: "Unpack[GroupOptionsArgs]",
) -> Group:
    """Describe a group; nothing is written until it is kicked on a broker.

    ``await group(members, then=...).kiq(broker)`` plans and dispatches it.
    Members are ``Signature`` s or ``chain(...)`` s (a chain counts once its last
    step ends). The options (``GroupOptions``): ``then`` receives a
    ``GroupResult`` as its first argument once every member has an outcome; with
    ``failure_policy="fail"``, ``on_error`` receives it instead when any member
    failed; ``sweep_policy``, ``ttl`` and ``deadline`` (seconds) override the
    middleware's; ``cancellable`` members check for cancellation before they run.
    ``open=True``: members are added after planning (``handle.add``) until
    ``handle.seal()``; the continuation waits for the seal.
    A ``group_id`` makes planning idempotent. ``members`` may be an iterator or
    an async iterator (a generator): it is read once, when the group is kicked,
    a chunk at a time, and the planner holds one chunk of it, not all of it.
    """
    _check_members(members)
    parsed = GroupOptions.parse(options)
    if isinstance(members, Iterator | AsyncIterable):
        made = Group.model_construct(members=(), options=parsed, group_id=group_id)
        made._stream = _checked(members)
        return made
    listed = tuple(members)
    for index, member in enumerate(listed):
        _check_kind(index, member)
    return Group.model_construct(members=listed, options=parsed, group_id=group_id)


def _check_members(members: object) -> None:
    """``members`` is a collection or an iterator of members, not one, nor none."""
    if isinstance(members, Signature | ChainSpec):
        kind = "Signature" if isinstance(members, Signature) else "chain"
        raise InvalidGroupError(
            reason=f"members is one {kind}, not a list of them: write group([...]) "
            "with the members in a list (or pass an iterator of them)"
        )
    iterable = isinstance(members, Iterable | AsyncIterable)
    if not iterable or isinstance(members, str | bytes | Mapping):
        raise wrong_kind(
            "members", members, "a list (or an iterator) of Signatures or chains"
        )


def _listed(members: Iterable[Signature | ChainSpec]) -> list[Signature | ChainSpec]:
    """Members to add, as a list, each checked for its kind."""
    _check_members(members)
    if isinstance(members, AsyncIterable):
        raise wrong_kind("members", members, "a list of Signatures or chains")
    listed = list(members)
    for index, member in enumerate(listed):
        _check_kind(index, member)
    return listed


def _check_kind(index: int, member: object) -> None:
    if not isinstance(member, Signature | ChainSpec):
        raise wrong_kind(f"member {index}", member, "a Signature or a chain")


async def _checked(
    members: Iterator[Signature | ChainSpec] | AsyncIterable[Signature | ChainSpec],
) -> AsyncIterator[Signature | ChainSpec]:
    """An iterator's members, each checked for its kind as it is read."""
    index = 0
    if isinstance(members, AsyncIterable):
        async for member in members:
            _check_kind(index, member)
            yield member
            index += 1
        return
    for member in members:
        _check_kind(index, member)
        yield member
        index += 1
