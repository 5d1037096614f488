"""``bench-results/summary.png``: the benchmarks in one picture."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import matplotlib as mpl

mpl.use("Agg")  # no display: this only ever writes a file

import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.container import BarContainer
from matplotlib.ticker import FuncFormatter

from benchmarks._targets import (
    CELERY_CHORD_COMMANDS,
    FLAT,
    TARGET_CONTINUATION_MS,
    TARGET_CPU_RATIO,
    TARGET_FANIN_MARGIN,
    TARGET_FLAT,
    TARGET_LONGEST_MS,
    TARGET_ROUND_TRIPS,
)
from benchmarks.overhead import PEERS_SOURCE

OURS = "#2b7bba"
BASELINE = "#7f7f7f"
BAD = "#d6604d"
PEER = "#bdbdbd"
WALL = "#92c5de"
PARENT = "#9e9ac8"
TARGET = "#1a9850"


def _deadlock(ax: Axes, data: dict[str, Any]) -> None:
    patterns = [
        ("waiting", "parents wait", BAD),
        ("fanin", "fan-in", OURS),
        ("parent", "parents only kick", PARENT),
        ("baseline", "no parent", BASELINE),
    ]
    rows = {
        (r["pattern"], r["slots"]): r
        for r in [*data["runs"], *data.get("reference_runs", [])]
    }
    slots = sorted({slot for _, slot in rows})
    width = 0.8 / len(patterns)
    for offset, (pattern, label, color) in enumerate(patterns):
        for x, slot in enumerate(slots):
            row = rows.get((pattern, slot))
            if row is None:
                continue
            # Every bar is as tall as its time, a deadlocked run's too (it
            # lasted until its parents gave up): the axis reaches the tallest.
            failed = row["albums_finished"] < row["albums"]
            bar = ax.bar(
                x + (offset - (len(patterns) - 1) / 2) * width,
                row["seconds"],
                width,
                color=color,
                hatch="//" if failed else None,
                label=label if x == 0 else None,
            )
            text = f"{row['seconds']:.3f}"
            if failed:
                text += f"\n{row['albums_finished']}/{row['albums']}"
                if row["albums_finished"] == 0:
                    text += "\ngave up"
            ax.bar_label(bar, [text], fontsize=7)
    for x, slot in enumerate(slots):
        ideal = data["ideal_seconds"][str(slot)]
        ax.hlines(ideal, x - 0.45, x + 0.45, colors=TARGET, linestyles="dashed")
    ax.set_ylim(0, 1.2 * max(row["seconds"] for row in rows.values()))
    ax.set_xticks(range(len(slots)), [f"{s} slots" for s in slots])
    repeats = data["repeats"]
    ax.set_ylabel(
        "seconds to the last album"
        + (" (1 run)" if repeats == 1 else f" (median of {repeats})")
    )
    fanin, parent = rows.get(("fanin", 10)), rows.get(("parent", 10))
    lines = ["Deadlock: 10 albums x 5 resizes of 200 ms"]
    if fanin and parent:
        over = fanin["seconds"] / parent["seconds"] - 1
        lines.append(
            f"fan-in vs parents only kick, 10 slots: {over:+.1%}"
            f" (target <= {TARGET_FANIN_MARGIN:+.0%})"
        )
    lines.append("hatched: not every album finished; dashed: ideal")
    ax.set_title("\n".join(lines), fontsize=10)
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
        f"Duplicates: {data['deliveries']} deliveries for {data['children']} children",
        fontsize=10,
    )
    ax.legend(fontsize=8)


def _overhead(ax: Axes, data: dict[str, Any]) -> None:
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
            _label(ax, bar, f"{cpu:.2f}")
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
        _label(ax, bar, f"{middle:.2f}", padding=3)
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
            label=textwrap.fill(f"peers' wall time, {PEERS_SOURCE}", 44)
            if first
            else None,
        )
        _label(ax, bar, f"{ratio:.2f}")
        positions.append(x)
        labels.append(textwrap.fill(name, 14))
        x += 0.9
    ax.margins(y=0.1)
    ax.axhline(
        TARGET_CPU_RATIO,
        color=TARGET,
        linestyle="dashed",
        label=f"CPU target {TARGET_CPU_RATIO:.2f}",
    )
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(positions, labels, fontsize=7)
    ax.set_ylabel("group / the same N plain tasks")
    ax.set_title("Overhead: a group of N no-op members vs N plain tasks", fontsize=10)
    ax.legend(fontsize=7, loc="upper left")


def _label(ax: Axes, bar: BarContainer, text: str, padding: float = 0) -> None:
    """A value on its bar, on white: readable where a target line crosses it."""
    for label in ax.bar_label(bar, [text], fontsize=8, padding=padding):
        label.set_bbox({"facecolor": "white", "edgecolor": "none", "pad": 0.5})


def _first(items: list[Any]) -> list[tuple[bool, Any]]:
    """Each item, with whether it is the first (the one that gets a legend)."""
    return [(index == 0, item) for index, item in enumerate(items)]


def _commands(ax: Axes, data: dict[str, Any]) -> None:
    celery, trips = CELERY_CHORD_COMMANDS, TARGET_ROUND_TRIPS
    counting = data.get("counting")
    if not counting:
        ax.text(0.5, 0.5, "not measured (no MONITOR)", ha="center", va="center")
        ax.set_axis_off()
        return
    ours = [counting["round_trips_per_child"], counting["redis_commands_per_child"]]
    bars = ax.bar([0, 1], ours, 0.5, color=OURS, label="fan-in, per completion")
    ax.bar_label(bars, [f"{v:.2f}" for v in ours], fontsize=8)
    peer = ax.bar([1.55], [celery], 0.5, color=PEER, label="Celery 5.7 chord")
    ax.bar_label(peer, [str(celery)], fontsize=8)
    ax.hlines(
        trips,
        -0.3,
        0.3,
        colors=TARGET,
        linestyles="dashed",
        label=f"target: <= {trips:g} round trip",
    )
    # A log axis: a twentieth of a round trip and a dozen commands both show.
    ax.set_yscale("log")
    ax.set_ylim(0.01, 4 * celery)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.set_xticks(
        [0, 1, 1.55],
        ["client round trips", "commands in Redis", "Celery chord\ncommands"],
        fontsize=8,
    )
    ax.set_ylabel("per child completion (log scale)")
    ax.set_title("Cost of one child completion", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")


def _scale_modes(data: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """The runs that ran, by mode (every member kicked, windowed), smallest N first."""
    modes = []
    for windowed, name in ((False, "all kicked"), (True, "windowed")):
        rows = [
            r for r in data["runs"] if r["windowed"] == windowed and not r["skipped"]
        ]
        if rows:
            window = f" (K={rows[0]['window']})" if windowed else ""
            modes.append((name + window, sorted(rows, key=lambda r: r["n"])))
    return modes


def _scale_costs(ax: Axes, data: dict[str, Any]) -> None:
    """Each cost per member over its value at the smallest N: flat is 1."""
    colors = (OURS, BAD, PARENT, BASELINE, WALL)
    for style, (mode, rows) in zip(("-", "--"), _scale_modes(data), strict=False):
        for color, (key, name) in zip(colors, FLAT.items(), strict=False):
            first = rows[0][key]
            points = [(r["n"], r[key] / first) for r in rows if first and r[key]]
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, style, marker="o", color=color, label=f"{name}, {mode}")
    ax.axhline(TARGET_FLAT, color=TARGET, linestyle="dashed", label="target")
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xscale("log")
    sizes = sorted({r["n"] for _, rows in _scale_modes(data) for r in rows})
    ax.set_xticks(sizes, [f"{n:,}" for n in sizes])
    ax.set_ylim(top=max(1.5, ax.get_ylim()[1]))
    ax.set_xlabel("group size N (no-op members)")
    ax.set_ylabel("per member, over the smallest N's")
    ax.set_title("Scale: cost per member as the group grows", fontsize=10)
    ax.legend(fontsize=6, loc="upper left", ncol=2)  # above the target line


def _scale_latency(ax: Axes, data: dict[str, Any]) -> None:
    """Latencies and the slowest command per run, the recipe's at N = 20 first."""
    measures = (
        ("last_member_to_continuation_ms", "last member to continuation", OURS),
        ("first_member_start_ms", "kick to first member", WALL),
        ("longest_redis_command_ms", "longest Redis command", BAD),
    )
    groups: list[tuple[str, dict[str, Any]]] = []
    recipe = data.get("recipe")
    if recipe:
        groups += [(f"N={recipe['n']}\nours", recipe["fanin"])]
        groups += [(f"N={recipe['n']}\nrecipe", recipe["recipe"])]
    for mode, rows in _scale_modes(data):
        groups += [(f"N={r['n']:,}\n{mode.split(' (')[0]}", r) for r in rows]
    width = 0.8 / len(measures)
    for offset, (key, label, color) in enumerate(measures):
        for x, (_, row) in enumerate(groups):
            value = row.get(key)
            if value:
                bar = ax.bar(
                    x + (offset - 1) * width, value, width, color=color,
                    label=label if x == len(groups) - 1 else None,
                )  # fmt: skip
                ax.bar_label(bar, [f"{value:.3g}"], fontsize=6)
    ax.axhline(TARGET_CONTINUATION_MS, color=TARGET, linestyle="dashed",
               label=f"continuation target {TARGET_CONTINUATION_MS:g} ms")  # fmt: skip
    ax.axhline(TARGET_LONGEST_MS, color=BAD, linestyle="dotted",
               label=f"longest command target {TARGET_LONGEST_MS:g} ms")  # fmt: skip
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.set_xticks(range(len(groups)), [name for name, _ in groups], fontsize=7)
    ax.set_ylabel("ms (log scale)")
    ax.set_title("Scale: latencies, and the slowest single command", fontsize=10)
    ax.legend(fontsize=6, loc="upper left")


def _small_groups(ax: Axes, data: dict[str, Any]) -> None:
    """Wall time over plain tasks per N, the library beside the recipe."""
    rows = sorted(data["runs"], key=lambda row: row["n"])
    width = 0.38
    for offset, (side, label, color) in enumerate(
        (("library", "this library", OURS), ("recipe", "the seed's recipe", PEER))
    ):
        for x, row in enumerate(rows):
            measured = row[side]
            bar = ax.bar(
                x + (offset - 0.5) * width, measured["wall_ratio"], width, color=color,
                label=label if x == 0 else None,
            )  # fmt: skip
            # The last member to the continuation, under each fan-in's ratio.
            text = f"{measured['wall_ratio']:.2f}x\n"
            text += f"{measured['last_to_continuation_ms']:.1f} ms"
            ax.bar_label(bar, [text], fontsize=6)
    ax.axhline(1, color=BASELINE, linestyle="dotted", label="plain tasks")
    ax.set_xticks(range(len(rows)), [f"N={row['n']:,}" for row in rows], fontsize=8)
    ax.set_ylabel("wall time over plain tasks (x)")
    ax.set_title(
        "Small groups: wall over plain; ms: last member to continuation", fontsize=10
    )
    ax.legend(fontsize=7, loc="upper right")


def draw(
    path: Path,
    results: dict[str, dict[str, Any]],
    *,
    title: str,
    settings: Sequence[str],
) -> None:
    """Draw whichever benchmarks ran into one PNG, titled with the run's settings.

    ``settings`` are lines saying when the run was and what it ran (quick or
    not, repeats, sizes): a chart is read away from the terminal it came from.
    """
    panels: list[Callable[[Axes], None]] = []
    if "deadlock" in results:
        panels.append(lambda ax: _deadlock(ax, results["deadlock"]))
    if "duplicates" in results:
        panels.append(lambda ax: _duplicates(ax, results["duplicates"]))
    if "overhead" in results:
        panels.append(lambda ax: _overhead(ax, results["overhead"]))
        panels.append(lambda ax: _commands(ax, results["overhead"]))
    if "scale" in results:
        panels.append(lambda ax: _scale_costs(ax, results["scale"]))
        panels.append(lambda ax: _scale_latency(ax, results["scale"]))
    if "small_groups" in results:
        panels.append(lambda ax: _small_groups(ax, results["small_groups"]))
    rows = (len(panels) + 1) // 2
    columns = 1 if len(panels) <= 1 else 2
    fig, axes = plt.subplots(
        rows, columns, figsize=(6.5 * columns, 4.5 * rows + 0.8), squeeze=False
    )
    for index, ax in enumerate(axes.flat):
        if index < len(panels):
            panels[index](ax)
        else:
            ax.set_axis_off()
    # The title and the run's settings on top, in inches from the edge, so
    # they keep their place whatever the number of panels.
    height = fig.get_figheight()
    fig.text(0.5, 1 - 0.12 / height, title, ha="center", va="top", fontsize=13,
             fontweight="bold")  # fmt: skip
    # Wrapped to the figure's width (about 15 characters an inch at 9 points).
    width = int(15 * fig.get_figwidth())
    lines = [part for line in settings for part in textwrap.wrap(line, width)]
    fig.text(0.5, 1 - 0.42 / height, "\n".join(lines), ha="center", va="top",
             fontsize=9)  # fmt: skip
    fig.tight_layout(rect=(0, 0, 1, 1 - (0.5 + 0.17 * len(lines)) / height))
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
