"""The sweep: find groups and chains that stopped moving, and act on them.

Nothing waits on a group, so without a sweep a stuck group is invisible. The
sweep reads the index of groups (scored by when to look next), judges each from
its own keys (the index may be stale, and is pruned), and acts by the group's
sweep policy or the caller's override; then it does the same for chains. A lock
(SET NX PX) makes two concurrent sweeps act once; a batch bound keeps one short.
"""

import contextlib
import logging
import uuid

from redis.exceptions import RedisError

from taskiq_fanin import metrics
from taskiq_fanin.chains import chain_index
from taskiq_fanin.context import FanInContext
from taskiq_fanin.domain.config import ms
from taskiq_fanin.domain.exceptions import NotReplicatedError
from taskiq_fanin.domain.results import SweepPolicy
from taskiq_fanin.groups import group_index
from taskiq_fanin.storage.keys import sweep_lock_key
from taskiq_fanin.sweep import known
from taskiq_fanin.sweep.chain_sweep import judge_chain
from taskiq_fanin.sweep.group_sweep import judge
from taskiq_fanin.sweep.report import (
    CHAIN_KINDS,
    FindingKind,
    SweepReport,
    log_finding,
)

logger = logging.getLogger("taskiq_fanin.sweep")

#: Groups one sweep examines at most; the next sweep goes on from there.
DEFAULT_BATCH = 100
#: The shortest time a sweep's lock is held, in seconds.
MIN_LOCK_SECONDS = 60.0


async def sweep(
    ctx: FanInContext,
    *,
    sweep_policy: SweepPolicy | str | None = None,
    dry_run: bool = False,
    batch: int = DEFAULT_BATCH,
) -> SweepReport:
    """Examine up to ``batch`` due groups (and chains) and act on them.

    ``sweep_policy`` overrides each group's own sweep policy for stuck groups, and the
    middleware's for stuck chains (``give_up`` fails them); a crashed
    finaliser is always recovered (its continuation dispatched again with the same
    task id) unless ``dry_run``, which writes nothing at all (not even the lock:
    it can run beside an acting sweep, and on a read-only replica).
    """
    override = SweepPolicy(sweep_policy) if sweep_policy is not None else None
    if dry_run:
        return await _examine(ctx, override=override, dry_run=True, batch=batch)
    lock_key = sweep_lock_key(ctx.config.prefix)
    holder = uuid.uuid4().hex
    lock_ms = ms(max(ctx.config.finaliser_lease, MIN_LOCK_SECONDS))
    if not await _lock(ctx, lock_key, holder, lock_ms):
        logger.info("Another sweep holds %s; skipping", lock_key)
        return SweepReport(dry_run=dry_run, skipped=True)
    try:
        return await _examine(ctx, override=override, dry_run=False, batch=batch)
    finally:
        await ctx.scripts.release_lock(lock_key, holder)


async def _lock(ctx: FanInContext, lock_key: str, holder: str, lock_ms: int) -> bool:
    """Take the sweep's lock (SET NX PX); False: another sweep holds it.

    Through the shared pipeline: under replicated durability a lock the replicas
    missed is not taken (a failover would hand it to a second sweep): given
    back, best effort, and the error raised, as for any write not replicated.
    Unless the lock is another sweep's (SET NX refused: nothing was written,
    its replies hidden behind the WAIT's refusal): then this sweep is skipped.
    """
    try:
        taken = await ctx.scripts.send(
            lambda pipe: pipe.set(lock_key, holder, nx=True, px=lock_ms),
            written=lock_key,
        )
    except NotReplicatedError:
        with contextlib.suppress(RedisError, OSError):
            held = await ctx.redis.get(lock_key)
            if held is not None and held not in (holder, holder.encode()):
                return False  # another sweep's
        with contextlib.suppress(RedisError, OSError):
            await ctx.scripts.release_lock(lock_key, holder)
        raise
    return bool(taken)


async def _examine(
    ctx: FanInContext,
    *,
    override: SweepPolicy | None,
    dry_run: bool,
    batch: int,
) -> SweepReport:
    """Judge (and unless ``dry_run``, act on) up to ``batch`` due groups and chains."""
    chain_policy = override or ctx.config.sweep_policy
    report = SweepReport(dry_run=dry_run, tasks_checked=known.tasks_checked(ctx))
    for chains in (False, True):
        index = chain_index if chains else group_index
        _, due = await index.due(ctx, batch)
        report.examined += len(due)
        for item_id in due:
            try:
                if chains:
                    finding = await judge_chain(
                        ctx, item_id, sweep_policy=chain_policy, dry_run=dry_run
                    )
                else:
                    finding = await judge(
                        ctx, item_id, override=override, dry_run=dry_run
                    )
            except Exception:
                # One that cannot be handled must not block every later sweep:
                # it goes to the back of the queue, and the others are handled.
                kind = "chain" if chains else "group"
                logger.exception("Sweep of %s %s failed", kind, item_id)
                if not dry_run:
                    after = ms(ctx.config.finaliser_lease)
                    await index.reschedule(ctx, item_id, after)
                continue
            if finding is not None:
                report.findings.append(finding)
    for finding in report.findings:
        log_finding(finding)
    metrics.record_sweep(
        (finding.kind.value for finding in report.findings), stuck=len(report.stuck)
    )
    await _record_workflows(ctx, report)
    return report


async def _record_workflows(ctx: FanInContext, report: SweepReport) -> None:
    """Set the open and overdue gauges from what this sweep read.

    Overdue: the groups and chains it found past their deadline and not ended
    (every finding but a pruned entry). Open: the entries left in each index
    once it pruned what it found ended (one ``ZCARD`` each). Best effort: a
    gauge left as it was is no lost work.
    """
    overdue = {"group": 0, "chain": 0}
    for finding in report.findings:
        if finding.kind is not FindingKind.GONE:
            overdue["chain" if finding.kind in CHAIN_KINDS else "group"] += 1
    try:
        groups, chains = await group_index.size(ctx), await chain_index.size(ctx)
    except (RedisError, OSError):
        logger.warning("The open groups and chains were not counted")
        return
    metrics.record_workflows("group", open_=groups, overdue=overdue["group"])
    metrics.record_workflows("chain", open_=chains, overdue=overdue["chain"])


async def sweep_group(
    ctx: FanInContext, group_id: str, *, sweep_policy: SweepPolicy | str
) -> SweepReport:
    """Judge one group and act on it by ``sweep_policy``, as a sweep would.

    Under the sweep's lock (``skipped`` when another sweep holds it): what the
    web page's re-drive button runs for the one group it shows.
    """
    override = SweepPolicy(sweep_policy)
    lock_key = sweep_lock_key(ctx.config.prefix)
    holder = uuid.uuid4().hex
    lock_ms = ms(max(ctx.config.finaliser_lease, MIN_LOCK_SECONDS))
    if not await _lock(ctx, lock_key, holder, lock_ms):
        return SweepReport(dry_run=False, skipped=True)
    report = SweepReport(dry_run=False, tasks_checked=known.tasks_checked(ctx))
    try:
        finding = await judge(ctx, group_id, override=override, dry_run=False)
    finally:
        await ctx.scripts.release_lock(lock_key, holder)
    report.examined = 1
    if finding is not None:
        report.findings.append(finding)
        log_finding(finding)
    return report
