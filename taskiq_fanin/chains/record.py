"""Reading a chain's workflow record: where the chain is, and how it ended.

The answer to "where is my video?": current step, state, times, and the error of
a failed step. Its transitions are scripts (``ChainScripts``).
"""

from datetime import datetime, timezone

from taskiq_fanin import metrics
from taskiq_fanin.chains import due
from taskiq_fanin.chains.cursor import ChainCursor, PendingStep
from taskiq_fanin.context import FanInContext
from taskiq_fanin.domain.config import ms, positive
from taskiq_fanin.domain.ids import step_id
from taskiq_fanin.domain.results import (
    ChainState,
    ChainStatus,
    MemberError,
    OnErrorState,
    from_millis,
)
from taskiq_fanin.domain.spec import GROUP_STEP_NAME, UNNAMED
from taskiq_fanin.groups.reading import DEFAULT_LIST_LIMIT
from taskiq_fanin.storage.keys import ChainKeys, chain_index_key, validate_chain_id
from taskiq_fanin.storage.records import ChainRecord, read_indexed
from taskiq_fanin.storage.replies import Begin

#: What a listing shows: chains not over yet.
OPEN = frozenset({ChainState.RUNNING, ChainState.FAILING})


def keys_of(ctx: FanInContext, chain_id: str) -> ChainKeys:
    """The keys of a chain's record."""
    return ChainKeys(ctx.config.prefix, chain_id)


async def status(ctx: FanInContext, chain_id: str) -> ChainStatus:
    """Current step, state, times and error of a chain, from its record.

    With Redis's clock at the read, which its age goes by while it runs.
    """
    validate_chain_id(chain_id, derived=True)
    found = await ctx.chain_scripts.read(keys_of(ctx, chain_id))
    read_at = datetime.fromtimestamp(await ctx.redis_now(), tz=timezone.utc)
    return await _status(ctx, chain_id, found, read_at)


async def _status(
    ctx: FanInContext, chain_id: str, found: ChainRecord, read_at: datetime
) -> ChainStatus:
    """The status of a chain read at ``read_at``, due when the sweep finds it stuck.

    ``due.step_due``: waiting on a group step that is on time, it is due when
    that group is (the sweep's ``chain_stuck`` agrees with ``overdue()``).
    """
    due_at = None
    if found.state is ChainState.RUNNING and found.updated_at is not None:
        now = int(read_at.timestamp() * 1000)
        due_at = (await due.step_due(ctx, found, now)).at
    return status_from_record(chain_id, found, read_at=read_at, due_at=due_at)


def status_from_record(
    chain_id: str,
    found: ChainRecord,
    *,
    read_at: datetime | None = None,
    due_at: int | None = None,
) -> ChainStatus:
    """A ``ChainStatus`` from a chain's record (state ``missing``: it is missing).

    ``due_at``: when its step counts as stuck (``due.step_due``); else a step
    span after the record last moved, if it recorded its span.
    """
    if found.state is ChainState.MISSING:
        return ChainStatus(chain_id=chain_id, state=ChainState.MISSING, read_at=read_at)
    error = found.error
    if (
        due_at is None
        and found.deadline_ms is not None
        and found.updated_at is not None
    ):
        due_at = found.updated_at + found.deadline_ms
    due = from_millis(due_at)
    return ChainStatus(
        chain_id=chain_id,
        state=found.state,
        step=found.step,
        steps=found.steps,
        step_names=list(found.step_names),
        started=from_millis(found.started_at),
        updated=from_millis(found.updated_at),
        finished=from_millis(found.finished_at),
        failed_step=found.failed_step,
        error=MemberError(type=error.type, message=error.message) if error else None,
        failed_members=error.members if error else {},
        lost_members=error.lost if error else [],
        failures=found.failures,
        on_error_state=on_error_state(found),
        due=due,
        version=found.version or None,
        name=found.workflow or None,
        step_group_id=_step_group_id(chain_id, found),
        read_at=read_at,
    )


def _step_group_id(chain_id: str, found: ChainRecord) -> str | None:
    """The group the chain's current step is, while it runs one."""
    names = found.step_names
    at_group = found.step < len(names) and names[found.step].startswith(GROUP_STEP_NAME)
    if found.state is ChainState.RUNNING and at_group:
        return step_id(chain_id, found.step)
    return None


def on_error_state(found: ChainRecord) -> OnErrorState:
    """What became of the chain's ``on_error``, from its record.

    A copy that began set ``on_error_state``; before that, a chain that failed
    has one to run if its pending kick's cursor carries it (every step's does).
    A chain that did not fail has none to run: it is read only then.
    """
    if found.on_error_state:
        return OnErrorState(found.on_error_state)
    failed = found.state in (ChainState.FAILING, ChainState.FAILED)
    if not failed or not found.pending:
        return OnErrorState.NONE
    cursor = PendingStep.model_validate_json(found.pending).cursor
    return OnErrorState.NONE if cursor.on_error is None else OnErrorState.PENDING


async def list_chains(
    ctx: FanInContext,
    *,
    stuck: bool = False,
    limit: int = DEFAULT_LIST_LIMIT,
    now: datetime | None = None,
) -> list[ChainStatus]:
    """Up to ``limit`` chains in the sweep's index still running (or failing).

    Soonest due first, paging past the failed ones the sweep watches.

    With ``stuck``, only those running past their deadline at a step, on
    Redis's clock (unless ``now`` says otherwise): what the sweep finds as
    ``chain_stuck``.
    """
    positive("limit", limit)
    if now is None:
        now = datetime.fromtimestamp(await ctx.redis_now(), tz=timezone.utc)
    statuses: list[ChainStatus] = []
    start = 0
    # Pages of ``limit``: the failed chains the sweep watches until their
    # ``on_error`` ran to its end are indexed too, and are not listed.
    while len(statuses) < limit:
        found = await read_indexed(
            ctx.redis,
            chain_index_key(ctx.config.prefix),
            limit,
            lambda chain_id: keys_of(ctx, chain_id).record,
            ChainRecord,
            start=start,
        )
        for chain_id, chain in found:
            if chain.state in OPEN:
                statuses.append(await _status(ctx, chain_id, chain, now))
        if len(found) < limit:
            break
        start += limit
    listed = statuses[:limit]
    return [status for status in listed if not stuck or status.overdue(now)]


async def state(ctx: FanInContext, chain_id: str) -> ChainState:
    """The chain's state alone."""
    return (await ctx.chain_scripts.read(keys_of(ctx, chain_id))).state


async def begin_step(
    ctx: FanInContext,
    cursor: ChainCursor,
    *,
    attempt: int,
    delivery: str,
    takes_over: bool = True,
    observe_wait: bool = True,
) -> Begin:
    """May this delivery of the cursor's step run (at that step, one copy)?

    ``takes_over``: false for the sweep's copy (it takes no held lease over).
    The first copy of the step to begin observes its queue wait (once per step:
    ``beginStep`` says so to that copy alone), unless ``observe_wait`` is false
    (a group step's continuation: the wait was the group's run).
    """
    begun, wait = await ctx.chain_scripts.begin_step_waited(
        keys_of(ctx, cursor.id),
        token=cursor.token,
        step=cursor.index,
        attempt=attempt,
        delivery=delivery,
        lease_ms=ms(ctx.config.finaliser_lease),
        takes_over=takes_over,
    )
    if wait is not None and observe_wait:
        metrics.step_waited(wait.workflow or UNNAMED, wait.waited_ms / 1000)
    return begun


async def release_step(
    ctx: FanInContext, cursor: ChainCursor, *, attempt: int, delivery: str
) -> None:
    """A step's attempt ended with a retry to come: let the retry run.

    ``delivery``: the one the guard began it as; only its lease is released.
    """
    await ctx.chain_scripts.release_step(
        keys_of(ctx, cursor.id), token=cursor.token, step=cursor.index,
        attempt=attempt, delivery=delivery,
    )  # fmt: skip
