"""One exception tree for taskiq-fanin, rooted in taskiq's own ``TaskiqError``.

Exported, every one, from ``taskiq_fanin.errors``. Where each is met:

- **Bad input**, raised by the call that was given it *before* anything is
  written to Redis or sent to the broker, so nothing was half-done: the
  ``Invalid*Error`` s and ``GroupTooWideError``, ``IdInUseError``,
  ``GroupPlanConflictError``, ``GroupSealedError`` and ``GroupNotFoundError``
  (``handle.add`` / ``handle.seal``), ``InvalidOptionError``,
  ``MemberNotSerializableError``,
  ``MemberTooLargeError``, ``ArgumentsMismatchError``, ``NotATaskError``,
  ``UnknownTaskError``, ``MiddlewareNotFoundError``, ``NestingTooDeepError``;
  ``GroupTaskOrderError`` at decoration, when the module is imported.
- **In a worker**, failing the task that met it (nothing of its own is
  written): ``GroupTaskReturnError`` and ``NestingTooDeepError`` fail a
  ``@group_task`` fan-out, which plans no group; ``MemberNotSerializableError``
  and ``MemberTooLargeError`` fail a chain step whose result the next step
  cannot take. ``RunningElsewhereError`` is raised before a body runs, to leave
  a duplicate copy unacknowledged. ``NotReplicatedError`` (under
  ``durability="replicated"``) is Redis being away: retried, then the message
  is left unacknowledged. ``GroupResultsExpiredError`` is raised by a
  by-reference ``GroupResult`` read after its group's keys are gone.
  ``GroupLostError``: a streamed group's plan met Redis without the group.
- **Recorded outcomes**, never raised at a caller: ``GroupStepFailedError``
  (a chain's group step failed under policy ``fail``), ``ChainGivenUpError``
  (the sweep gave up on a stuck chain), both as the chain's error and in its
  ``ChainFailure``; ``ChainCancelledError``, a cancelled chain's outcome as a
  group member (``MemberError.type``).
- **Inside a task body**: ``WorkflowCancelledError`` from
  ``raise_if_cancelled()`` (the body stops; nothing of it is recorded);
  ``NotInTaskBodyError`` from ``is_cancelled()`` asked outside a body.
"""

from redis.exceptions import ConnectionError as RedisConnectionError
from taskiq.exceptions import NoResultError, TaskiqError

#: The most characters of a value an error message shows.
SHOWN_AT_MOST = 80


def shown(value: object, limit: int = SHOWN_AT_MOST) -> str:
    """``repr(value)``, cut to ``limit`` characters with the rest counted."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text)} characters)"


class FanInError(TaskiqError):
    """Base class of every taskiq-fanin error."""

    __template__ = "taskiq-fanin error"


class InvalidGroupError(FanInError, ValueError):
    """A group definition that cannot be planned as given."""

    __template__ = "Invalid group: {reason}"
    reason: str


class GroupTooWideError(InvalidGroupError):
    """More members than the configured maximum width."""

    __template__ = "A group of {size} members exceeds the maximum of {maximum}"
    size: int
    maximum: int
    reason: str = "too many members"


class InvalidGroupIdError(InvalidGroupError):
    """A group id that would break the Redis hash tag or key layout."""

    __template__ = "Invalid group id {group_id}: {reason}"
    group_id: str


class InvalidChainError(InvalidGroupError):
    """A chain definition that cannot be started as given.

    A kind of ``InvalidGroupError`` (chains and groups nest in each other), so
    that code catching that still catches it.
    """

    __template__ = "Invalid chain: {reason}"


class InvalidChainIdError(InvalidGroupError):
    """A chain id that would break the Redis hash tag or key layout."""

    __template__ = "Invalid chain id {chain_id}: {reason}"
    chain_id: str


class InvalidWorkflowIdError(InvalidGroupIdError, InvalidChainIdError):
    """An id looked up as a group or a chain (``status``, ``cancel``): neither."""

    __template__ = "Invalid group or chain id {group_id}: {reason}"


class IdInUseError(FanInError, ValueError):
    """A group and a chain cannot share an id: the second is refused unwritten."""

    __template__ = (
        "The id {workflow_id} is taken by a {holder}: a group and a chain cannot "
        "share an id, pick another"
    )
    workflow_id: str
    #: What holds the id: ``group`` or ``chain``.
    holder: str


class GroupPlanConflictError(FanInError, ValueError):
    """A group id planned again with other members: refused, nothing written.

    Planning the same members again (a retried ``kiq()``) is the same group.
    """

    __template__ = (
        "Group {group_id} exists with other members: planning an id again with "
        "the same members returns the group as it is, with others it is refused "
        "(nothing was written or kicked); give the new group another id, or, "
        "for a group that grows, plan it with group(..., open=True) and add "
        "members with handle.add(...)"
    )
    group_id: str


class GroupSealedError(FanInError, ValueError):
    """Members added to a group that takes no more: nothing was written or kicked.

    Only a group planned with ``open=True`` and not sealed yet takes members.
    """

    __template__ = (
        "Group {group_id} takes no more members: {why}; nothing was added (plan "
        "a group with group(..., open=True) to add members until handle.seal())"
    )
    group_id: str
    #: Why: sealed, planned without ``open=True``, or over (cancelled, ...).
    why: str


class GroupNotFoundError(FanInError, LookupError):
    """A group to grow, seal or follow that Redis does not hold.

    It was never planned, or it expired; nothing was written.
    """

    __template__ = (
        "Group {group_id} does not exist: it was never planned (plan it with "
        "group(..., group_id=...).kiq(broker) first) or it expired"
    )
    group_id: str


class ChainNotFoundError(FanInError, LookupError):
    """A chain to follow that Redis does not hold: never started, or expired."""

    __template__ = (
        "Chain {chain_id} does not exist: it was never started (start it with "
        "chain(..., chain_id=...).kiq(broker) first) or it expired"
    )
    chain_id: str


class InvalidOptionError(FanInError, ValueError):
    """An option (TTL, deadline, policy, ...) outside its allowed range."""

    __template__ = "Invalid option {name}={value}: {reason}"
    name: str
    value: object
    reason: str


class MemberNotSerializableError(FanInError, TypeError):
    """A member's arguments cannot be written to the ledger as JSON."""

    __template__ = "{what} ({task_name}) cannot be serialized as JSON: {reason}"
    #: Which: ``member 3``, ``the continuation then``, ...
    what: str
    task_name: str
    reason: str


class MemberTooLargeError(FanInError, ValueError):
    """A member's arguments are larger in the ledger than the configured cap."""

    __template__ = (
        "{what} ({task_name}) takes {size} bytes in the ledger, more than the "
        "{maximum} allowed (max_member_bytes): pass a reference (an id, a key, a "
        "URL) instead of the data"
    )
    #: Which: ``member 3``, ``the continuation then``, ...
    what: str
    task_name: str
    size: int
    maximum: int


class ArgumentsMismatchError(FanInError, TypeError):
    """A signature's arguments do not fit its task: the worker would refuse them."""

    __template__ = (
        "{what} ({task_name}) cannot take its arguments: {reason}. The task is "
        "{signature}{receives}"
    )
    #: Which: ``member 3``, ``the continuation then``, ``step 2 of the chain``...
    what: str
    task_name: str
    #: Python's own words: ``missing a required argument: 'x'``, ...
    reason: str
    #: The task's parameters as ``name(a, b, *, c=1)``, without taskiq's injected ones.
    signature: str
    #: What the library passes before the given arguments, if anything.
    receives: str = ""


class NotATaskError(FanInError, TypeError):
    """``Signature.of`` given something that is neither a taskiq task nor a name."""

    __template__ = "{given}, not a taskiq task or a task name: {fix}"
    given: str
    fix: str


class UnknownTaskError(FanInError, LookupError):
    """A signature names a task the broker does not know."""

    __template__ = (
        "No broker knows a task named {task_name!r} ({what}): a task of a group "
        "or chain is kicked on the broker planning it, or on another broker of "
        "this process whose FanInMiddleware has the same prefix (its own "
        "queue), so register it on one of them ({fix})"
    )
    task_name: str
    #: Which: ``member 3``, ``the continuation then``, ``step 2 of the chain``...
    what: str = "a signature"
    #: What to do: the names it may have meant, or how tasks are registered.
    fix: str = ""


class MiddlewareNotFoundError(FanInError, LookupError):
    """The broker has no ``FanInMiddleware`` (or it has not started)."""

    __template__ = "{reason}"
    reason: str


class NestingTooDeepError(FanInError, ValueError):
    """Groups and chains nested deeper than the configured bound."""

    __template__ = "Nesting depth {depth} exceeds the maximum of {maximum}"
    depth: int
    maximum: int


class GroupStepFailedError(FanInError, RuntimeError):
    """A group step of a chain failed under policy ``fail``: the chain stops."""

    __template__ = (
        "Group {group_id} failed: {failed} of {total} members failed, {lost} lost"
        "{details}"
    )
    group_id: str
    total: int
    failed: int
    lost: int
    #: The failed members' own errors: ``; member 1: ValueError: bad frame``.
    details: str = ""
    #: The same as data, for the chain's record: index -> (type, message) ...
    member_errors: tuple[tuple[int, str, str], ...] = ()
    #: ... and the indexes of the members lost.
    lost_members: tuple[int, ...] = ()


class GroupTaskOrderError(FanInError, TypeError):
    """``@group_task`` was put above ``@broker.task``, where it cannot work."""

    __template__ = (
        "@group_task must go under @broker.task: {name} is already a taskiq task. "
        "Write @broker.task first, then @group_task(...) on the line below it"
    )
    name: str


class GroupTaskReturnError(FanInError, TypeError):
    """A ``@group_task`` body returned something that is not members."""

    __template__ = (
        "@group_task {name} returned {returned}: return a list of Signature (or "
        "chain(...)) members, possibly empty, or a group(...)"
    )
    name: str
    returned: str


class GroupLostError(FanInError, RuntimeError):
    """A streamed group's plan met Redis without the group: chunks let go are lost.

    Redis lost the group mid-plan (a restart without persistence, a failover
    under ``acknowledged``): its iterator, read once, cannot give those chunks
    again, so what was written is taken back and nothing is kicked. Not Redis
    away: never retried. Plan the group again from its source.
    """

    __template__ = (
        "Group {group_id} was lost from Redis while it was planned (a restart "
        "without persistence, a failover): nothing of it was kicked; build the "
        "group again from its source and plan it again"
    )
    group_id: str


class RedisUnreachableError(FanInError, RedisConnectionError):
    """Redis did not answer when the broker started.

    Nothing listens, a wrong URL or port, a firewall: ``broker.startup()``
    raises it, so that a worker or a caller that cannot reach Redis says so at
    once, within ``socket_timeout``, not at its first kick.
    """

    __template__ = (
        "cannot reach Redis at {where} ({reason}; waited at most {seconds:g} "
        "s): is it running, and is the URL given to FanInMiddleware the right one?"
    )
    where: str
    seconds: float
    reason: str


class RunningElsewhereError(FanInError):
    """Another copy of this continuation or chain step holds its run lease.

    Raised before the body runs, so that this copy stays unacknowledged: it
    comes back, and runs if that other copy's worker died meanwhile.
    """

    __template__ = (
        "Task {task_id} is running elsewhere (another copy holds its run lease): "
        "this copy is left unacknowledged, to come back"
    )
    task_id: str


class NotReplicatedError(FanInError, RedisConnectionError):
    """Under ``durability="replicated"``: too few replicas took a write in time.

    The write is not done: Redis is away (a ``redis`` ``ConnectionError``).
    """

    __template__ = (
        "{acknowledged} of {replicas} replicas acknowledged the write within "
        "{timeout_ms} ms: it is treated as not done"
    )
    acknowledged: str
    replicas: int
    timeout_ms: int


class ChainCancelledError(FanInError):
    """The outcome of a chain that was cancelled (recorded for a chain member)."""

    __template__ = "The chain was cancelled"


class WorkflowCancelledError(FanInError, NoResultError):
    """Raised by ``raise_if_cancelled()`` in a body whose group or chain was cancelled.

    A ``NoResultError``, as taskiq reads one: no result is stored, and the retry
    middlewares do not retry it. The body stopped for a cancel: nothing of it is
    recorded, neither done nor failed, and the cancel's compensations run.
    """

    __template__ = "The {kind} {workflow_id} was cancelled: the body stopped there"
    #: ``group`` or ``chain``.
    kind: str
    workflow_id: str


class Skip(FanInError, NoResultError):  # noqa: N818 - a verdict, not a fault
    """Raised by a member's body whose input is not for it: ``raise Skip("why")``.

    The member is recorded once as skipped with its reason: it counts toward
    its group, neither done nor failed (``failure_policy="fail"`` does not
    fire), and shows in ``GroupResult.skipped`` and the group's status. A
    ``NoResultError``, as taskiq reads one: the retry middlewares do not retry
    it, and no result is stored. Outside a group member (a chain step), it is
    the step's failure.
    """

    __template__ = "Skipped: {reason}"
    reason: str

    def __init__(self, reason: str = "", /, **fields: object) -> None:
        # Pickling passes the message again beside the fields: the fields win.
        fields.setdefault("reason", str(reason))
        super().__init__(**fields)


class WaitingInsideTaskError(FanInError, RuntimeError):
    """A task body awaited another task's result inside a worker.

    It holds its slot while the other runs: with every slot so held nothing
    runs, and the worker deadlocks. Raised by the waiting-parent guard.
    """

    __template__ = (
        "Task {task_name} awaits the result of task {awaited} inside a worker: "
        "a body that waits on another holds its slot, and a worker whose slots "
        "all wait deadlocks. Run what needs the result after it instead, with "
        "group(..., then=...) or chain(...) (or set FanInMiddleware(waiting_guard="
        "'warn' or 'off') to allow it)"
    )
    task_name: str
    awaited: str


class NotInTaskBodyError(FanInError, RuntimeError):
    """A call that asks about the running task body, made where none runs."""

    __template__ = (
        "{call} asks about the task body running now, and none runs here: call "
        "it inside a task's body, in a worker whose broker has FanInMiddleware"
    )
    call: str


class ChainGivenUpError(FanInError, TimeoutError):
    """The sweep gave up on a chain stuck at a step past its deadline.

    Recorded as the chain's error, and handed to its ``on_error`` in the
    ``ChainFailure``; the compensations of the completed steps run.
    """

    __template__ = (
        "The sweep gave up on the chain at step {step} of {steps} ({task_name}), "
        "stuck for {stuck_seconds:.1f}s{reason}: find out why the step never "
        "ended (a worker lost, a task renamed in a deploy), then start it again"
    )
    #: The step it was stuck at, counted from 1.
    step: int
    steps: int
    task_name: str
    stuck_seconds: float
    #: Why, when the sweep knows: ``; task 'x' is unknown to this broker``.
    reason: str = ""


class GroupResultsExpiredError(FanInError, LookupError):
    """A by-reference ``GroupResult`` whose results Redis no longer holds.

    Raised by ``iter_results()`` and its siblings, never an empty list instead:
    the group's keys live until its continuation has completed and a tombstone
    after, and expired anyway (or were deleted), or the reference is read later.
    """

    __template__ = (
        "The results of group {group_id} are gone from Redis (expired, or read "
        "after its continuation completed plus tombstone_ttl): read them within "
        "the continuation, or raise the group's ttl and the tombstone_ttl"
    )
    group_id: str
