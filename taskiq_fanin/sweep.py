"""The sweep: find groups that stopped moving, and report, re-drive or give up.

Nothing waits on a group, so without a sweep a stuck group is invisible. The
sweep reads the index of open groups (scored by when to look next), judges each
group from its own keys (the index may be stale, and is pruned), and acts by the
group's sweep policy or the caller's override. A lock (SET NX PX) makes two
concurrent sweeps act once; a batch bound keeps one sweep short.
"""

import logging
import uuid
from typing import Any

from taskiq import AsyncBroker
from taskiq.decor import AsyncTaskiqDecoratedTask

from taskiq_fanin import completion, metrics
from taskiq_fanin.chain_spec import member_from_ledger
from taskiq_fanin.chain_sweep import sweep_chains
from taskiq_fanin.keys import GroupKeys, index_key, sweep_lock_key
from taskiq_fanin.middleware import FanInMiddleware, find_fanin
from taskiq_fanin.models import GroupState, SweepPolicy
from taskiq_fanin.planning import dispatch_members
from taskiq_fanin.scripts import Inspected, text
from taskiq_fanin.sweep_report import Finding, FindingKind, SweepAction, SweepReport

logger = logging.getLogger("taskiq_fanin.sweep")

#: Groups one sweep examines at most; the next sweep goes on from there.
DEFAULT_BATCH = 100
#: Who the sweep claims a finaliser's lease as.
SWEEP_CLAIMANT = f"sweep:{completion.CLAIMANT}"
#: The shortest time a sweep's lock is held, in seconds.
MIN_LOCK_SECONDS = 60.0


async def sweep(
    fanin: FanInMiddleware,
    *,
    policy: SweepPolicy | str | None = None,
    dry_run: bool = False,
    batch: int = DEFAULT_BATCH,
) -> SweepReport:
    """Examine up to ``batch`` due groups and act on them.

    ``policy`` overrides each group's own sweep policy for stuck groups; a crashed
    finaliser is always recovered (its continuation dispatched again with the same
    task id) unless ``dry_run``, which writes nothing at all (not even the lock:
    it can run beside an acting sweep, and on a read-only replica).
    """
    override = SweepPolicy(policy) if policy is not None else None
    if dry_run:
        return await _examine(fanin, override=override, dry_run=True, batch=batch)
    lock_key = sweep_lock_key(fanin.config.prefix)
    holder = uuid.uuid4().hex
    lock_ms = int(max(fanin.config.lease, MIN_LOCK_SECONDS) * 1000)
    if not await fanin.redis.set(lock_key, holder, nx=True, px=lock_ms):
        logger.info("Another sweep holds %s; skipping", lock_key)
        return SweepReport(dry_run=dry_run, skipped=True)
    try:
        return await _examine(fanin, override=override, dry_run=False, batch=batch)
    finally:
        await fanin.scripts.release_lock(lock_key, holder)


async def _examine(
    fanin: FanInMiddleware,
    *,
    override: SweepPolicy | None,
    dry_run: bool,
    batch: int,
) -> SweepReport:
    """Judge (and unless ``dry_run``, act on) up to ``batch`` due groups."""
    now = completion.now_ms()
    due = await fanin.redis.zrangebyscore(
        index_key(fanin.config.prefix), "-inf", now, start=0, num=batch
    )
    report = SweepReport(dry_run=dry_run, examined=len(due))
    for raw in due:
        group_id = text(raw)
        try:
            finding = await _judge(
                fanin, group_id, now=now, override=override, dry_run=dry_run
            )
        except Exception:
            # One group that cannot be handled must not block every later sweep:
            # it goes to the back of the queue, and the others are handled.
            logger.exception("Sweep of group %s failed", group_id)
            if not dry_run:
                await _reschedule(fanin, group_id, now + int(fanin.config.lease * 1000))
            continue
        if finding is not None:
            report.findings.append(finding)
    examined, chains = await sweep_chains(
        fanin, now=now, override=override, dry_run=dry_run, batch=batch
    )
    report.examined += examined
    report.findings.extend(chains)
    for finding in report.findings:
        _log(finding)
    metrics.record_sweep(report.findings)
    return report


async def _judge(
    fanin: FanInMiddleware,
    group_id: str,
    *,
    now: int,
    override: SweepPolicy | None,
    dry_run: bool,
) -> Finding | None:
    keys = GroupKeys(fanin.config.prefix, group_id)
    inspected = await fanin.scripts.inspect_group(keys)
    state = GroupState(inspected.meta["state"]) if inspected else GroupState.MISSING
    if inspected is None or state in (GroupState.COMPLETED, GroupState.CANCELLED):
        if not dry_run:
            await fanin.redis.zrem(index_key(fanin.config.prefix), group_id)
        return Finding(
            group_id=group_id,
            kind=FindingKind.GONE,
            action=SweepAction.PRUNE,
            applied=not dry_run,
            state=state.value,
        )
    meta = inspected.meta
    due_at = _due_at(meta, state)
    leased = (state is GroupState.CLAIMED and inspected.lease_held) or (
        state is GroupState.RUNNING and int(meta.get("run_until", 0)) > now
    )
    if due_at > now or leased:
        # Not stuck after all (the index is only a hint): look again later.
        if not dry_run:
            lease_end = now + int(fanin.config.lease * 1000)
            await _reschedule(fanin, group_id, max(due_at, lease_end))
        return None
    finding = _finding(group_id, state, inspected, now, due_at)
    if state is GroupState.CLAIMED:
        finding.kind, finding.action = (
            FindingKind.FINALISER_LOST,
            SweepAction.REDISPATCH,
        )
    elif state in (GroupState.DISPATCHED, GroupState.RUNNING):
        finding.kind = FindingKind.CONTINUATION_OVERDUE
        redrive = (override or SweepPolicy(meta["sweep"])) is SweepPolicy.REDRIVE
        finding.action = SweepAction.REDISPATCH if redrive else SweepAction.REPORT
    else:
        finding.kind = (
            FindingKind.STUCK if meta.get("planned") == "1" else FindingKind.UNPLANNED
        )
        finding.action = SweepAction((override or SweepPolicy(meta["sweep"])).value)
    if dry_run:
        return finding
    await _act(fanin, finding, meta, now)
    return finding


def _due_at(meta: dict[str, str], state: GroupState) -> int:
    """When a group in this state stops being on time (epoch ms)."""
    if state in (GroupState.DISPATCHED, GroupState.RUNNING):
        return int(meta.get("dispatched_at", 0)) + int(meta["span"])
    if state is GroupState.CLAIMED:
        return int(meta.get("claimed_at", 0))
    return int(meta["deadline"])


def _finding(
    group_id: str, state: GroupState, inspected: Inspected, now: int, due_at: int
) -> Finding:
    meta = inspected.meta
    return Finding(
        group_id=group_id,
        kind=FindingKind.STUCK,
        action=SweepAction.REPORT,
        applied=False,
        state=state.value,
        total=int(meta["total"]),
        done=int(meta["done_count"]),
        failed=int(meta["failed_count"]),
        missing=inspected.missing,
        age_seconds=(now - int(meta["created"])) / 1000,
        overdue_seconds=max(now - due_at, 0) / 1000,
        redrives=int(meta.get("redrives", 0)),
    )


async def _act(
    fanin: FanInMiddleware,
    finding: Finding,
    meta: dict[str, str],
    now: int,
) -> None:
    keys = GroupKeys(fanin.config.prefix, finding.group_id)
    token, action = meta["token"], finding.action
    # A group left as it was goes to the back of the due queue: every stuck group
    # is seen in turn, however many there are.
    look_again = now
    if action is SweepAction.REDRIVE:
        redriven = await fanin.scripts.redrive_group(
            keys, token=token, now_ms=now, max_redrives=fanin.config.max_redrives
        )
        finding.redrives = redriven.redrives
        if redriven.redriven:
            members = {i: member_from_ledger(e) for i, e in redriven.members.items()}
            await dispatch_members(
                fanin,
                finding.group_id,
                token,
                members,
                depth=int(meta.get("depth", 1)),
                cancellable=meta.get("cancellable") == "1",
                attempt=redriven.redrives,
            )
            metrics.MEMBERS_REDRIVEN.inc(len(members))
            finding.applied = True
            look_again = max(look_again, now + int(meta["span"]))  # its new deadline
        else:
            finding.note = f"not re-driven: {redriven.redrives} re-drives used"
    elif action is SweepAction.GIVE_UP:
        lost = await fanin.scripts.give_up(
            keys,
            token=token,
            now_ms=now,
            lease_ms=int(fanin.config.lease * 1000),
            claimant=completion.CLAIMANT,
        )
        if lost is not None:
            await completion.finalise(fanin, finding.group_id, token)
            finding.applied = True
            return
        finding.note = "no longer open"
    elif action is SweepAction.REDISPATCH:
        if finding.kind is FindingKind.FINALISER_LOST and not (
            await fanin.scripts.reclaim_finaliser(
                keys,
                token=token,
                now_ms=now,
                lease_ms=int(fanin.config.lease * 1000),
                claimant=SWEEP_CLAIMANT,
            )
        ):
            finding.note = "the finaliser's lease was taken meanwhile"
            return
        await completion.finalise(
            fanin, finding.group_id, token, claimant=SWEEP_CLAIMANT
        )
        finding.applied = True
        return
    else:
        finding.applied = True
    await _reschedule(fanin, finding.group_id, look_again)


async def _reschedule(fanin: FanInMiddleware, group_id: str, at_ms: int) -> None:
    await fanin.redis.zadd(index_key(fanin.config.prefix), {group_id: at_ms})


def _log(finding: Finding) -> None:
    fields: dict[str, Any] = {f"fanin_{k}": v for k, v in finding.model_dump().items()}
    logger.warning(
        "Group %s %s: %s%s (%d/%d done, %d failed, missing %s)",
        finding.group_id,
        finding.kind.value,
        "" if finding.applied else "would ",
        finding.action.value,
        finding.done,
        finding.total,
        finding.failed,
        finding.missing[:20],
        extra=fields,
    )


#: The sweep task's name on the user's broker: stable, so schedules survive deploys.
SWEEP_TASK_NAME = "taskiq_fanin.sweep"


def register_sweep_task(
    broker: AsyncBroker,
    *,
    schedule: list[dict[str, Any]] | None = None,
    **labels: Any,
) -> AsyncTaskiqDecoratedTask[Any, Any]:
    """Register the sweep as a task on ``broker``, named ``taskiq_fanin.sweep``.

    Schedule it with taskiq's own scheduler, e.g.
    ``register_sweep_task(broker, schedule=[{"interval": 60}])`` with a
    ``TaskiqScheduler(broker, [LabelScheduleSource(broker)])``. The task takes the
    arguments of :func:`sweep` (``policy``, ``dry_run``, ``batch``)
    and returns the ``SweepReport`` as a dict.
    """

    async def fanin_sweep(
        policy: str | None = None,
        dry_run: bool = False,
        batch: int = DEFAULT_BATCH,
    ) -> dict[str, Any]:
        report = await sweep(
            find_fanin(broker),
            policy=policy,
            dry_run=dry_run,
            batch=batch,
        )
        return report.model_dump(mode="json")

    if schedule is not None:
        labels["schedule"] = schedule
    return broker.register_task(fanin_sweep, task_name=SWEEP_TASK_NAME, **labels)
