"""``bench-results/summary.png``: the three benchmarks in one picture."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib as mpl

mpl.use("Agg")  # no display: this only ever writes a file

import matplotlib.pyplot as plt
from matplotlib.axes import Axes

OURS = "#2b7bba"
BASELINE = "#7f7f7f"
BAD = "#d6604d"
PEER = "#bdbdbd"
WALL = "#92c5de"
TARGET = "#1a9850"


def _deadlock(ax: Axes, data: dict[str, Any]) -> None:
    patterns = [("waiting", "parents wait", BAD), ("fanin", "fan-in", OURS)]
    patterns.append(("baseline", "no parent", BASELINE))
    rows = {(r["pattern"], r["slots"]): r for r in data["runs"]}
    slots = sorted({slot for _, slot in rows})
    finished = [r["seconds"] for r in rows.values() if r["albums_finished"]]
    # A deadlocked run lasts as long as its timeouts: cut its bar, say how long.
    top = 1.4 * max(finished or [1.0])
    width = 0.8 / len(patterns)
    for offset, (pattern, label, color) in enumerate(patterns):
        for x, slot in enumerate(slots):
            row = rows.get((pattern, slot))
            if row is None:
                continue
            failed = row["albums_finished"] < row["albums"]
            bar = ax.bar(
                x + (offset - 1) * width,
                min(row["seconds"], top),
                width,
                color=color,
                hatch="//" if failed else None,
                label=label if x == 0 else None,
            )
            text = f"{row['albums_finished']}/{row['albums']}"
            if row["seconds"] > top:
                text += f", gave up\nafter {row['seconds']:.1f} s (bar cut)"
            ax.bar_label(bar, [text], fontsize=8)
    for x, slot in enumerate(slots):
        ideal = data["ideal_seconds"][str(slot)]
        ax.hlines(ideal, x - 0.45, x + 0.45, colors=TARGET, linestyles="dashed")
    ax.set_ylim(0, top * 1.2)
    ax.set_xticks(range(len(slots)), [f"{s} slots" for s in slots])
    ax.set_ylabel("seconds to the last album (median)")
    ax.set_title(
        "Deadlock: 10 albums x 5 resizes of 200 ms\n"
        "(labels: albums finished; hatched: not all; dashed: ideal)"
    )
    ax.legend(fontsize=8, loc="upper right")


def _duplicates(ax: Axes, data: dict[str, Any]) -> None:
    measures = ["early", "double", "never"]
    width = 0.38
    for offset, (side, label, color) in enumerate(
        [("counter", "counter (INCR)", BAD), ("set", "library (set)", OURS)]
    ):
        values = [data[side][m] for m in measures]
        bars = ax.bar(
            [x + (offset - 0.5) * width for x in range(3)],
            values,
            width,
            color=color,
            label=label,
        )
        ax.bar_label(bars, fontsize=8)
    ax.margins(y=0.12)
    ax.set_xticks(range(3), ["fired early", "fired twice", "never fired"])
    ax.set_ylabel(f"albums of {data['albums']}")
    ax.set_title(
        f"Duplicates: {data['deliveries']} deliveries for {data['children']} children"
    )
    ax.legend(fontsize=8)


def _overhead(ax: Axes, data: dict[str, Any], cpu_target: float) -> None:
    positions, labels = [], []
    x = 0.0
    for first, row in _first(data["runs"]):
        cpu = row.get("worker_cpu_ratio")
        if cpu is not None:
            bar = ax.bar(
                x - 0.21,
                cpu,
                0.4,
                color=OURS,
                label="worker CPU per task" if first else None,
            )
            ax.bar_label(bar, [f"{cpu:.2f}"], fontsize=8)
        middle = row["pair_ratio_median"]
        low, high = row["pair_ratio_range"]
        bar = ax.bar(
            x + 0.21,
            middle,
            0.4,
            yerr=[[middle - low], [high - middle]],
            capsize=4,
            color=WALL,
            label="wall time: median of the pairs, min-max" if first else None,
        )
        # Above the error bar's cap, not across it.
        ax.bar_label(bar, [f"{middle:.2f}"], fontsize=8, padding=3)
        positions.append(x)
        labels.append(
            f"N={row['n']:,}\n{row['pairs']} pair" + ("s" if row["pairs"] != 1 else "")
        )
        x += 1.0
    for first, (name, ratio) in _first(list(data.get("peers_ratio", {}).items())):
        bar = ax.bar(
            x,
            ratio,
            0.5,
            color=PEER,
            label="peers' wall time (seed)" if first else None,
        )
        ax.bar_label(bar, [f"{ratio:.2f}"], fontsize=8)
        positions.append(x)
        labels.append(name.replace(" ", "\n", 1))
        x += 0.75
    ax.margins(y=0.1)
    ax.axhline(
        cpu_target,
        color=TARGET,
        linestyle="dashed",
        label=f"CPU target {cpu_target:.2f}",
    )
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(positions, labels, fontsize=7)
    ax.set_ylabel("group / the same N plain tasks")
    ax.set_title("Overhead: a group of N no-op members vs N plain tasks")
    ax.legend(fontsize=7, loc="upper left")


def _first(items: list[Any]) -> list[tuple[bool, Any]]:
    """Each item, with whether it is the first (the one that gets a legend)."""
    return [(index == 0, item) for index, item in enumerate(items)]


def _commands(ax: Axes, data: dict[str, Any], celery: int) -> None:
    counting = data.get("counting")
    if not counting:
        ax.text(0.5, 0.5, "not measured (no MONITOR)", ha="center", va="center")
        ax.set_axis_off()
        return
    labels = ["round trips", "commands in Redis"]
    ours = [counting["round_trips_per_child"], counting["redis_commands_per_child"]]
    bars = ax.bar([0, 1], ours, 0.5, color=OURS, label="fan-in, per completion")
    ax.bar_label(bars, [f"{v:.2f}" for v in ours], fontsize=8)
    peer = ax.bar([1.55], [celery], 0.5, color=PEER, label="Celery 5.7 chord")
    ax.bar_label(peer, [str(celery)], fontsize=8)
    ax.hlines(1.0, -0.3, 0.3, colors=TARGET, linestyles="dashed", label="target")
    ax.set_xticks([0, 1, 1.55], [*labels, "Celery chord\ncommands"], fontsize=8)
    ax.set_title("Cost of one child completion")
    ax.legend(fontsize=8)


def draw(
    path: Path,
    deadlock: dict[str, Any] | None,
    duplicates: dict[str, Any] | None,
    overhead: dict[str, Any] | None,
    *,
    cpu_target: float,
    celery_commands: int,
) -> None:
    """Draw whichever benchmarks ran into one PNG."""
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    panels = [
        (deadlock, _deadlock),
        (duplicates, _duplicates),
        (overhead, lambda ax, d: _overhead(ax, d, cpu_target)),
        (overhead, lambda ax, d: _commands(ax, d, celery_commands)),
    ]
    for ax, (data, panel) in zip(axes.flat, panels, strict=True):
        if data is None:
            ax.set_axis_off()
        else:
            panel(ax, data)
    fig.suptitle("taskiq-fanin benchmarks")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
