"""Prometheus metrics, when ``prometheus_client`` is installed; no-ops otherwise.

Every event is also logged with structured ``extra`` fields (``fanin_event``,
``group_id``, ...), so metrics are an addition, never the only signal. Alert on
stuck groups with ``taskiq_fanin_stuck_groups > 0`` (set by each sweep) or on
``increase(taskiq_fanin_sweep_findings_total{kind="stuck"}[15m]) > 0``.
"""

from collections.abc import Iterable
from typing import Any


class _NoMetric:
    """Stands in for a metric when prometheus_client is not installed."""

    def labels(self, *_: Any, **__: Any) -> "_NoMetric":
        return self

    def inc(self, amount: float = 1) -> None:
        """Do nothing."""

    def set(self, value: float) -> None:
        """Do nothing."""

    def observe(self, value: float) -> None:
        """Do nothing."""


try:
    from prometheus_client import Counter, Gauge, Histogram
except ImportError:  # pragma: no cover - depends on the environment
    GROUPS_PLANNED: Any = _NoMetric()
    GROUPS_FINALISED: Any = _NoMetric()
    MEMBERS_RECORDED: Any = _NoMetric()
    MEMBERS_REDRIVEN: Any = _NoMetric()
    SWEEP_FINDINGS: Any = _NoMetric()
    STUCK_GROUPS: Any = _NoMetric()
    DISPATCH_LATENCY: Any = _NoMetric()
    WAITING_SECONDS: Any = _NoMetric()
else:
    GROUPS_PLANNED = Counter(
        "taskiq_fanin_groups_planned_total", "Groups planned and dispatched."
    )
    GROUPS_FINALISED = Counter(
        "taskiq_fanin_groups_finalised_total",
        "Groups whose continuation was dispatched, by continuation kind.",
        ["continuation"],
    )
    MEMBERS_RECORDED = Counter(
        "taskiq_fanin_members_recorded_total",
        "Member outcomes recorded, by outcome (done, failed, skipped).",
        ["outcome"],
    )
    MEMBERS_REDRIVEN = Counter(
        "taskiq_fanin_members_redriven_total", "Members kicked again by the sweep."
    )
    SWEEP_FINDINGS = Counter(
        "taskiq_fanin_sweep_findings_total", "Sweep findings, by kind.", ["kind"]
    )
    STUCK_GROUPS = Gauge(
        "taskiq_fanin_stuck_groups",
        "Groups open past their deadline at the last sweep.",
    )
    DISPATCH_LATENCY = Histogram(
        "taskiq_fanin_continuation_dispatch_seconds",
        "From the claim of the last member to the continuation's dispatch.",
    )
    WAITING_SECONDS = Histogram(
        "taskiq_fanin_waiting_seconds",
        "Time task bodies spent awaiting other tasks' results in a worker "
        "(the waiting-parent pattern), by the waiting task's name.",
        ["task_name"],
        buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 300),
    )


def record_sweep(kinds: Iterable[str], *, stuck: int) -> None:
    """Count a sweep's findings by kind, and set the stuck-groups gauge."""
    for kind in kinds:
        SWEEP_FINDINGS.labels(kind=kind).inc()
    STUCK_GROUPS.set(stuck)


_RECORDED = {
    outcome: MEMBERS_RECORDED.labels(outcome=outcome)
    for outcome in ("done", "failed", "skipped")
}


def member_recorded(outcome: str) -> None:
    """Count one recorded member outcome (the labelled child is looked up once)."""
    _RECORDED[outcome].inc()


def waited(task_name: str, seconds: float) -> None:
    """A task body spent ``seconds`` awaiting another task's result."""
    WAITING_SECONDS.labels(task_name=task_name).observe(seconds)
