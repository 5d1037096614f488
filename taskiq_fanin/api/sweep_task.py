"""The sweep, from Python and as a task the user schedules with taskiq's scheduler."""

from typing import Any

from taskiq import AsyncBroker
from taskiq.decor import AsyncTaskiqDecoratedTask

from taskiq_fanin.api.broker import Target, context_of
from taskiq_fanin.domain.results import SweepPolicy
from taskiq_fanin.sweep import run
from taskiq_fanin.sweep.report import SweepReport

#: The sweep task's name on the user's broker: stable, so schedules survive deploys.
SWEEP_TASK_NAME = "taskiq_fanin.sweep"


async def sweep(
    target: Target,
    *,
    sweep_policy: SweepPolicy | str | None = None,
    dry_run: bool = False,
    batch: int = run.DEFAULT_BATCH,
) -> SweepReport:
    """Examine up to ``batch`` due groups (and chains) and act on them.

    ``sweep_policy`` overrides each group's own sweep policy for stuck groups, and the
    middleware's for stuck chains (``give_up`` fails them); a crashed
    finaliser is always recovered (its continuation dispatched again with the same
    task id) unless ``dry_run``, which writes nothing at all (not even the lock).
    """
    return await run.sweep(
        context_of(target), sweep_policy=sweep_policy, dry_run=dry_run, batch=batch
    )


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
    arguments of :func:`sweep` (``sweep_policy``, ``dry_run``, ``batch``)
    and returns the ``SweepReport`` as a dict.
    """

    async def fanin_sweep(
        sweep_policy: str | None = None,
        dry_run: bool = False,
        batch: int = run.DEFAULT_BATCH,
    ) -> dict[str, Any]:
        report = await sweep(
            broker, sweep_policy=sweep_policy, dry_run=dry_run, batch=batch
        )
        return report.model_dump(mode="json")

    if schedule is not None:
        labels["schedule"] = schedule
    return broker.register_task(fanin_sweep, task_name=SWEEP_TASK_NAME, **labels)
