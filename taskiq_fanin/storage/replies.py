"""What the scripts answer, typed: codes as enums, replies as dataclasses.

Codes are defined once (the sweep's rechecks' in ``rechecks``) and rendered
into the prelude (``REPLY_CODES``): a script answers ``Recorded.CLAIMED``.
"""

import enum
import json
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from taskiq_fanin.storage.rechecks import Lost
from taskiq_fanin.storage.records import GroupMeta
from taskiq_fanin.storage.records.fields import text


class Applied(enum.IntEnum):
    """Result of a script that makes its one change or writes nothing."""

    #: Nothing was written (missing, not this token's, not in a state for it).
    UNCHANGED = 0
    APPLIED = 1


class Created(enum.IntEnum):
    """Result of ``createGroup``."""

    CREATED = 1
    EXISTS = 2
    #: It exists, but its planner died before dispatching every member (it has
    #: not been planned a planner lease after its creation).
    EXISTS_UNPLANNED = 3
    #: A chain holds the id: nothing was written.
    ID_IN_USE = 4
    #: A group of this id exists with other members: nothing was written.
    OTHER_PLAN = 5


class Added(enum.IntEnum):
    """Result of ``addMembers``."""

    ADDED = 1
    NO_GROUP = 2
    #: It takes no more members (sealed, planned closed, or not open).
    SEALED = 3
    #: The batch would take it past ``max_group_size``.
    TOO_WIDE = 4


class Sealed(enum.IntEnum):
    """Result of ``sealGroup``."""

    #: Sealed now; members still to end.
    SEALED = 1
    #: Sealed and complete: the caller holds the finaliser's lease.
    CLAIMED = 2
    #: Sealed before (or planned closed): nothing changed.
    ALREADY = 3
    #: Cancelled or given up before a seal.
    NOT_OPEN = 4
    NO_GROUP = 5


class Started(enum.IntEnum):
    """Result of ``startChain``."""

    EXISTS = 0
    CREATED = 1
    #: A group holds the id: nothing was written.
    ID_IN_USE = 2


class Begin(enum.IntEnum):
    """Result of ``beginContinuation``, ``beginOnError`` and ``beginStep``."""

    SKIP = 0
    RUN = 1
    RUNNING_ELSEWHERE = 2
    #: ``beginStep`` only: skip it, and kick the next step again (its kick was lost).
    KICK_NEXT = 3


class Outcome(str, enum.Enum):
    """A member's terminal outcome."""

    DONE = "done"
    FAILED = "failed"
    #: Its body raised ``Skip``: counted toward the group, neither done nor failed.
    SKIPPED = "skipped"


class Recorded(enum.IntEnum):
    """Result of ``recordOutcome``, one per member."""

    RECORDED = 1
    CLAIMED = 2
    DUPLICATE = 3
    CONFLICT = 4
    NO_GROUP = 5
    NOT_MEMBER = 6
    TOKEN_MISMATCH = 7
    FINALISED = 8
    #: Counted in a cancelled group (the member ran anyway): nothing to finalise.
    COUNTED_CANCELLED = 9


class Advanced(enum.IntEnum):
    """Result of ``advanceChain``."""

    GONE = 0
    ADVANCED = 1
    DUPLICATE = 2
    #: Cancelled while the step ran, or given up by the sweep at this step.
    CANCELLED = 3


@dataclass(frozen=True)
class StepWait:
    """What ``beginStep`` tells the first copy of a step to begin."""

    #: From the chain's last move (the previous step's end, or its start) to
    #: now, on Redis's clock.
    waited_ms: int
    #: The chain's name ('' in a record written before names were kept).
    workflow: str


class Finished(enum.IntEnum):
    """Result of ``finishChain``."""

    #: Not at that step (a duplicate), not this token's, or over.
    NOT_NOW = 0
    DONE = 1
    #: Cancelled while the step ran, or given up by the sweep at this step.
    CANCELLED = 2
    #: The record has expired: nothing else will record the member.
    MISSING = 3


class Failed(enum.IntEnum):
    """Result of ``beginFailingChain``."""

    NOT_NOW = 0
    #: Failing now: its compensations are handed back.
    FAILING = 1
    #: Cancelled while the step ran, or given up by the sweep at this step.
    CANCELLED = 2
    MISSING = 3


class Cancel(enum.IntEnum):
    """Result of ``cancelChain``."""

    #: Missing, or ended otherwise.
    GONE = 0
    #: Cancelled by this call.
    NOW = 1
    #: Cancelled before: handed back again.
    BEFORE = 2


#: Every reply code a script returns: the prelude defines each as a Lua table.
REPLY_CODES: tuple[type[enum.IntEnum], ...] = (
    Applied,
    Created,
    Added,
    Sealed,
    Started,
    Begin,
    Recorded,
    Advanced,
    Finished,
    Failed,
    Cancel,
    Lost,
)


@dataclass(frozen=True)
class Addition:
    """What ``addMembers`` handed back."""

    code: Added
    token: str = ""
    #: The batch's first index, and the ledger's total after it.
    first: int = 0
    total: int = 0
    #: Indexes below this may be kicked now (a windowed group's window).
    released: int = 0
    depth: int = 1
    cancellable: bool = False
    #: The group's state, when it takes no more members.
    state: str = ""


def addition(reply: list[Any]) -> Addition:
    """``addMembers``'s reply, typed."""
    code = Added(int(reply[0]))
    if code is Added.ADDED:
        token, first, total, released, depth, cancellable = reply[1:7]
        return Addition(
            code,
            text(token),
            int(first),
            int(total),
            int(released),
            int(depth),
            text(cancellable) == "1",
        )
    if code is Added.SEALED:
        return Addition(code, state=text(reply[1]))
    if code is Added.TOO_WIDE:
        return Addition(code, total=int(reply[1]))
    return Addition(code)


@dataclass(frozen=True)
class Sealing:
    """What ``sealGroup`` handed back."""

    code: Sealed
    token: str = ""
    total: int = 0
    #: The group's state, when it was sealed before or is not open.
    state: str = ""


def sealing(reply: list[Any]) -> Sealing:
    """``sealGroup``'s reply, typed."""
    code = Sealed(int(reply[0]))
    if code is Sealed.NO_GROUP:
        return Sealing(code)
    state = text(reply[3]) if len(reply) > 3 else ""
    return Sealing(code, text(reply[1]), int(reply[2]), state)


@dataclass(frozen=True)
class Cancelled:
    """What ``cancelChain`` handed back."""

    #: Cancelled by this call (False: cancelled before, and handed back again).
    now: bool
    #: The step the chain was at.
    step: int
    #: The label of the group member the chain is, or ''.
    member: str
    #: The compensation of the step that ran while it was cancelled, or ''.
    step_undo: str
    #: The compensations of the steps completed, in step order.
    compensations: list[str]


class Creation(NamedTuple):
    """What ``createGroup`` answered."""

    created: Created
    token: str
    state: str
    #: The ledger takes no more chunks (a group made before chunks were: True).
    sealed: bool


def creation(reply: list[Any]) -> Creation:
    """``createGroup``'s reply."""
    code, token, *rest = reply
    return Creation(
        Created(code),
        text(token),
        text(rest[0]) if rest else "open",
        sealed=bool(int(rest[1])) if len(rest) > 1 else True,
    )


@dataclass(frozen=True)
class Inspected:
    """What ``inspectGroup`` read: the group as the sweep judges it."""

    meta: GroupMeta
    lease_held: bool
    #: Redis's clock when it was read (epoch ms): the meta's times are on it.
    now_ms: int


@dataclass(frozen=True)
class Redriven:
    """What ``redriveGroup`` did: may its window be kicked, the re-drive count."""

    redriven: bool
    redrives: int
    #: The window was the pass's last: the whole ledger has been gone over.
    over: bool


@dataclass(frozen=True)
class GivenUp:
    """What one window of ``giveUp`` did."""

    #: The window was gone over (the first one moved the group to giving_up).
    applied: bool
    #: Members noted lost so far.
    lost: int
    #: Where the pass goes on; -1 once claimed (or when there is nothing to do).
    next: int

    @property
    def claimed(self) -> bool:
        """This window was the last: the sweep holds the lease, and finalises."""
        return self.applied and self.next < 0


def given_up(reply: list[Any]) -> GivenUp:
    """``giveUp``'s reply."""
    code, lost, next_index = reply
    return GivenUp(
        applied=Applied(code) is Applied.APPLIED, lost=int(lost), next=int(next_index)
    )


@dataclass(frozen=True)
class CollectedOutcomes:
    """What ``collectOutcomes`` read: the raw material of a ``GroupResult``.

    By reference (a group over its ``results_inline_max``), the counts only:
    ``lost``, ``done``, ``failed``, ``results`` and ``errors`` are empty, and
    the continuation reads them in pages.
    """

    total: int
    then: str
    on_error: str
    failure_policy: str
    state: str
    deadline_ms: int
    by_reference: bool
    done_count: int
    failed_count: int
    lost_count: int
    lost: list[int]
    done: list[int]
    failed: list[int]
    results: dict[int, Any]
    errors: dict[int, Any]
    #: Skipped members are in ``done`` and ``done_count`` too: these say which.
    skipped_count: int = 0
    #: Each skipped member's reason (inline only).
    skipped: dict[int, Any] = field(default_factory=dict)


#: The field a skipped member's reason is kept under in the errors hash.
SKIP_FIELD = "s"


def collected(reply: list[Any]) -> CollectedOutcomes:
    """``collectOutcomes``'s reply (also what ``recordOutcome`` hands a claimant)."""
    head, by_reference, done_count, failed_count, lost_count, lost = reply[:6]
    total, then, on_error, failure_policy, state, deadline, *more = head
    done, failed, results, errors = reply[6:]
    failures, skips = _failures_and_skips(errors)
    return CollectedOutcomes(
        total=int(total),
        then=text(then),
        on_error=text(on_error),
        failure_policy=text(failure_policy),
        state=text(state),
        deadline_ms=int(deadline),
        by_reference=bool(by_reference),
        done_count=int(done_count),
        failed_count=int(failed_count),
        lost_count=int(lost_count),
        lost=sorted(int(member) for member in lost),
        done=sorted(int(member) for member in done),
        failed=sorted(int(member) for member in failed),
        results=_json_by_index(results),
        errors=_json_by_index(failures),
        skipped_count=int(more[0] or 0) if more else 0,
        skipped=_json_by_index(skips),
    )


def inspected(reply: list[Any]) -> Inspected | None:
    """``inspectGroup``'s reply; ``None`` when the group is gone."""
    if not reply:
        return None
    meta, lease_held, now = reply
    return Inspected(
        meta=GroupMeta.from_hash(flat_hash(meta)),
        lease_held=bool(lease_held),
        now_ms=int(now),
    )


def flat_hash(flat: list[Any]) -> dict[str, str]:
    """A hash read as a flat field/value list, as text."""
    fields = [text(value) for value in flat]
    return dict(zip(fields[::2], fields[1::2], strict=True))


def redriven(reply: list[Any]) -> Redriven:
    """``redriveGroup``'s reply."""
    code, redrives, over = reply
    return Redriven(
        redriven=Applied(code) is Applied.APPLIED,
        redrives=int(redrives),
        over=bool(over),
    )


def _failures_and_skips(
    flat: list[bytes | str],
) -> tuple[list[bytes | str], list[bytes | str]]:
    """The errors hash, flat: the failures (by index), the skip reasons ('s<index>')."""
    failures: list[bytes | str] = []
    skips: list[bytes | str] = []
    for name, value in zip(flat[::2], flat[1::2], strict=True):
        field_name = text(name)
        if field_name.startswith(SKIP_FIELD):
            skips += [field_name.removeprefix(SKIP_FIELD), value]
        else:
            failures += [name, value]
    return failures, skips


def _json_by_index(flat: list[bytes | str]) -> dict[int, Any]:
    fields, values = flat[::2], flat[1::2]
    return {
        int(field): json.loads(value)
        for field, value in zip(fields, values, strict=True)
    }
