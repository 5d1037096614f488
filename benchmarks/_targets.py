"""The targets of the benchmarks beside what was measured: the summary's rows.

Each function reads one benchmark's JSON document (and nothing else), so a
document written earlier can be judged again.
"""

from __future__ import annotations

import functools
from typing import Any

from benchmarks._report import Check, count

#: How much slower than parents that only kick (``parent``, taskiq's own hop,
#: measured in the same run) the fan-in may be at 10 slots (fraction).
TARGET_FANIN_MARGIN = 0.02
#: The most worker CPU a group's member may cost next to a plain task (ratio).
#: Wall time is reported, not a target: on a shared machine the same side's
#: run varies by far more than the difference between the sides.
TARGET_CPU_RATIO = 1.10
#: Client round trips one child completion may cost.
TARGET_ROUND_TRIPS = 1.0
#: Commands a Celery 5.7 chord runs in Redis per completion; ours must be fewer.
CELERY_CHORD_COMMANDS = 12


def _patterns(data: dict[str, Any]) -> list[str]:
    """The deadlock's patterns in the order they ran, the reference's last."""
    rows = [*data["runs"], *data.get("reference_runs", [])]
    return list(dict.fromkeys(row["pattern"] for row in rows))


def _find(data: dict[str, Any], pattern: str, slots: int) -> dict[str, Any] | None:
    for row in [*data["runs"], *data.get("reference_runs", [])]:
        if row["pattern"] == pattern and row["slots"] == slots:
            return row  # type: ignore[no-any-return]
    return None


def _finished(row: dict[str, Any]) -> str:
    """Albums finished, the median; the spread of the repeats when they differ."""
    samples = row["samples"]["albums_finished"]
    low, high = min(samples), max(samples)
    spread = "" if low == high else f" ({low}-{high})"
    return f"{row['albums_finished']} of {row['albums']}{spread}"


def deadlock_checks(data: dict[str, Any]) -> list[Check]:
    """The deadlock targets beside what was measured."""
    result: list[Check] = []
    wanted = {(10, "waiting"): 0, (20, "waiting"): None, (10, "fanin"): None}
    for (slots, pattern), expected in wanted.items():
        row = _find(data, pattern, slots)
        if row is None:
            continue
        samples = row["samples"]["albums_finished"]
        goal = row["albums"] if expected is None else expected
        result.append(
            Check(
                "deadlock",
                f"{pattern}, {slots} slots: finished",
                f"{goal} of {row['albums']}",
                _finished(row),
                all(s == goal for s in samples),
            )
        )
    guarded = data.get("guarded")
    if guarded is not None:
        result.append(
            Check(
                "deadlock",
                f"waiting, guard on, {guarded['slots']} slots: refused",
                f"{guarded['albums']} of {guarded['albums']}",
                f"{guarded['refused']} ({', '.join(guarded['errors'])}) in "
                f"{guarded['seconds_to_last_refusal']:.3f} s",
                guarded["refused"] == guarded["albums"]
                and guarded["errors"] == ["WaitingInsideTaskError"],
            )
        )
    # fakeredis runs in the benchmark's process: its times say little.
    timed = data.get("redis") != "fakeredis"
    # The fan-in against the hop any parent costs (the target), and both
    # against no parent at all (reported): the parent's own cost is the floor
    # under the fan-in's, and taskiq's, not the library's.
    for pattern, other, target in (
        ("fanin", "parent", True),
        ("fanin", "baseline", False),
        ("parent", "baseline", False),
    ):
        row, against = _find(data, pattern, 10), _find(data, other, 10)
        if row is None or against is None:
            continue
        over = row["seconds"] / against["seconds"] - 1
        result.append(
            Check(
                "deadlock",
                f"{pattern} vs {other}, 10 slots",
                f"within {TARGET_FANIN_MARGIN:.0%}" if target else "reported",
                f"{row['seconds']:.3f} / {against['seconds']:.3f} s, {over:+.1%}",
                over <= TARGET_FANIN_MARGIN if target and timed else None,
            )
        )
    counts = sorted(int(key) for key in data["ideal_seconds"])
    at = f"at {' / '.join(map(str, counts))} slots"
    ideal = " / ".join(f"{data['ideal_seconds'][str(s)]:.3f}" for s in counts)
    # The bound the slots allow first, then each pattern's time beside it.
    result.append(Check("deadlock", f"ideal {at}", "", f"{ideal} s", None))
    for pattern in _patterns(data):
        rows = [_find(data, pattern, s) for s in counts]
        times = " / ".join(
            "-" if row is None else f"{row['seconds']:.3f}" for row in rows
        )
        result.append(
            Check("deadlock", f"{pattern} {at}", "reported", f"{times} s", None)
        )
    return result


def duplicates_checks(data: dict[str, Any]) -> list[Check]:
    """The duplicates targets beside what was measured."""
    albums = data["albums"]
    counter, library = data["counter"], data["set"]
    check = functools.partial(Check, "duplicates")

    def fires(side: dict[str, int]) -> str:
        return f"{side['early']} / {side['double']} / {side['never']} of {albums}"

    zero = library["early"] == library["double"] == library["never"] == 0
    delivered = f"{data['deliveries']} for {data['children']} children"
    return [
        check("set: early / twice / never", "0 / 0 / 0", fires(library), zero),
        check(
            "counter: early / twice / never",
            "early > 0",
            fires(counter),
            counter["early"] > 0,
        ),
        check("deliveries", "reported", delivered, None),
    ]


def _pairs(row: dict[str, Any]) -> str:
    """The wall time ratio: the median of the pairs and their spread."""
    low, high = row["pair_ratio_range"]
    if row["pairs"] == 1:
        return f"{low:.2f} (1 pair)"
    return f"{row['pair_ratio_median']:.2f} ({low:.2f}-{high:.2f})"


def _cpu(row: dict[str, Any]) -> str:
    """Worker CPU per member / per plain task: the ratio and the two."""
    if row["worker_cpu_ratio"] is None:
        return "not measurable here"
    cpu = row["cpu_us_per_child"]
    fanin, plain = cpu["fanin"]["worker"], cpu["plain"]["worker"]
    return f"{row['worker_cpu_ratio']:.2f}: {fanin:.0f} / {plain:.0f} us"


def overhead_checks(data: dict[str, Any]) -> list[Check]:
    """The overhead targets beside what was measured."""
    result: list[Check] = []
    check = functools.partial(Check, "overhead")
    # An embedded fakeredis runs every script through lupa in the benchmark's
    # own process: its times and the worker's CPU say nothing about the library.
    timed = data.get("redis") != "fakeredis"
    for row in data["runs"]:
        ratio = row["worker_cpu_ratio"]
        result.append(
            Check(
                "overhead",
                f"worker CPU ratio, N={row['n']:,}",
                f"<= {TARGET_CPU_RATIO:.2f}",
                _cpu(row),
                ratio <= TARGET_CPU_RATIO if timed and ratio is not None else None,
            )
        )
    for row in data["runs"]:
        measure = f"wall ratio, N={row['n']:,}, {count(row['pairs'], 'pair')}"
        result.append(check(measure, "reported", _pairs(row), None))
    for row in data.get("few_slots", []):
        measure = f"wall ratio, N={row['n']:,}, {count(row['max_async_tasks'], 'slot')}"
        times = f"{row['fanin_seconds']:.2f} / {row['plain_seconds']:.2f} s"
        result.append(check(measure, "reported", f"{row['ratio']:.2f}: {times}", None))
    first = data["runs"][0]
    trips = first.get("round_trips_per_child")
    commands = first.get("redis_commands_per_child")
    result.append(
        Check(
            "overhead",
            "round trips per completion",
            f"<= {TARGET_ROUND_TRIPS:g}",
            "not measurable here" if trips is None else f"{trips:.2f}",
            None if trips is None else trips <= TARGET_ROUND_TRIPS,
        )
    )
    result.append(
        Check(
            "overhead",
            "Redis commands per completion",
            f"< {CELERY_CHORD_COMMANDS}",
            "not measurable here"
            if commands is None
            else f"{commands:.2f} (Celery: {CELERY_CHORD_COMMANDS})",
            None if commands is None else commands < CELERY_CHORD_COMMANDS,
        )
    )
    for row in data["runs"]:
        memory = row.get("bytes_per_member")
        measured = "not measurable here" if memory is None else f"{memory:.0f} B"
        result.append(
            check(f"memory per member, N={row['n']:,}", "reported", measured, None)
        )
    return result


#: How much more a member may cost at the largest N than at the smallest.
TARGET_FLAT = 1.20
#: The slowest single command Redis may run, at any N (ms).
TARGET_LONGEST_MS = 10.0
#: The last member's end to the continuation's start, at any N (ms).
TARGET_CONTINUATION_MS = 5.0
#: How far behind the seed's recipe each latency may be at N = 20 (ms).
TARGET_BESIDE_RECIPE_MS = 1.0
#: Costs that must stay flat in N: their names in the table.
FLAT = {
    "worker_cpu_us_per_member": "CPU us/member",
    "round_trips_per_member": "round trips/member",
    "redis_commands_per_member": "commands/member",
    "peak_bytes_per_member": "peak B/member",
    "continuation_message_bytes": "message B",
}


def _values(rows: list[dict[str, Any]], key: str, form: str) -> str:
    return "/".join("-" if r[key] is None else format(r[key], form) for r in rows)


def _flat(rows: list[dict[str, Any]], key: str, timed: bool) -> tuple[str, bool | None]:
    """Largest N against smallest N: "1.05x (480, 505)"."""
    small, large = rows[0][key], rows[-1][key]
    if small is None or large is None or not small:
        return "not measurable here", None
    ratio = large / small
    met = ratio <= TARGET_FLAT if timed or "cpu" not in key else None
    return f"{ratio:.2f}x ({small:.3g}, {large:.3g})", met


def _longest(rows: list[dict[str, Any]], floor: float) -> tuple[str, bool]:
    """The slowest command of each run; none logged: under the log's threshold."""
    shown, met = [], True
    for row in rows:
        ms, logged = row["longest_redis_command_ms"], row["longest_redis_command"]
        if ms is None and logged is not None:  # read, and nothing that slow
            ms, text = floor, f"<{floor:g}"
        else:
            text = "-" if ms is None else f"{ms:.1f}"
        shown.append(text)
        met = met and ms is not None and ms < TARGET_LONGEST_MS
    return f"{'/'.join(shown)} ms", met


def _scale_rows(
    rows: list[dict[str, Any]], tag: str, timed: bool, floor: float
) -> list[Check]:
    """One mode's (every member kicked, or windowed) rows, smallest N first."""
    check = functools.partial(Check, "scale")
    result = []
    if len(rows) > 1:
        for key, name in FLAT.items():
            measured, met = _flat(rows, key, timed)
            target = f"<= {TARGET_FLAT:.2f}x"
            result.append(check(f"{name}, {tag}", target, measured, met))
    measured, met = _longest(rows, floor)
    limit = f"< {TARGET_LONGEST_MS:g} ms"
    result.append(
        check(f"longest command, {tag}", limit, measured, met if timed else None)
    )
    values = [r["last_member_to_continuation_ms"] for r in rows]
    met = all(v is not None and v < TARGET_CONTINUATION_MS for v in values)
    result.append(
        check(
            f"to continuation, {tag}",
            f"< {TARGET_CONTINUATION_MS:g} ms",
            f"{_values(rows, 'last_member_to_continuation_ms', '.1f')} ms",
            met if timed else None,
        )
    )
    for key, name, unit, form in (
        ("first_member_start_ms", "first member", "ms", ".1f"),
        ("plan_seconds", "plan", "s", ".2f"),
        ("seconds", "wall", "s", ".2f"),
    ):
        measured = f"{_values(rows, key, form)} {unit}"
        result.append(check(f"{name}, {tag}", "reported", measured, None))
    return result


def scale_checks(data: dict[str, Any]) -> list[Check]:
    """The scale targets beside what was measured."""
    timed = data.get("redis") != "fakeredis"
    result: list[Check] = []
    for windowed in (False, True):
        rows = sorted(
            (r for r in data["runs"] if r["windowed"] == windowed), key=lambda r: r["n"]
        )
        tag = f"K={rows[0]['window']}" if rows and windowed else "all"
        if rows and rows[0]["skipped"]:
            result.append(Check("scale", f"windowed, {tag}", "runs", "skipped", None))
        elif rows:
            floor = data["slowlog_slower_than_ms"]
            result.extend(_scale_rows(rows, tag, timed, floor))
    recipe = data.get("recipe")
    for key, name in (
        ("first_member_start_ms", "first member"),
        ("last_member_to_continuation_ms", "to continuation"),
    ):
        if not recipe:
            break
        ours, theirs = recipe["fanin"][key], recipe["recipe"][key]
        result.append(
            Check(
                "scale",
                f"{name}, N={recipe['n']}",
                f"<= +{TARGET_BESIDE_RECIPE_MS:g} ms",
                f"{ours:.2f} vs recipe {theirs:.2f} ms",
                ours - theirs <= TARGET_BESIDE_RECIPE_MS if timed else None,
            )
        )
    return result


#: Where the library's group must be no slower than the recipe, in wall time
#: over plain tasks (ratio against ratio).
SMALL_WALL_SIZES = (20, 200)
#: Where the library's CPU per member must be within TARGET_CPU_RATIO of plain.
SMALL_CPU_SIZES = (200, 2000)
#: Where the first member must start within TARGET_BESIDE_RECIPE_MS of the recipe's.
SMALL_FIRST_SIZES = (20,)


def small_group_checks(data: dict[str, Any]) -> list[Check]:
    """The small-group targets beside what was measured, smallest N first."""
    timed = data.get("redis") != "fakeredis"
    check = functools.partial(Check, "small_groups")
    result: list[Check] = []
    for row in sorted(data["runs"], key=lambda r: r["n"]):
        n, ours, recipe = row["n"], row["library"], row["recipe"]
        wall = f"{ours['wall_ratio']:.2f}x vs recipe {recipe['wall_ratio']:.2f}x"
        met = ours["wall_ratio"] <= recipe["wall_ratio"]
        target = "<= the recipe's" if n in SMALL_WALL_SIZES else "reported"
        in_target = timed and n in SMALL_WALL_SIZES
        result.append(
            check(f"wall / plain, N={n}", target, wall, met if in_target else None)
        )
        for key, name, sizes_ in (
            ("last_to_continuation_ms", "to continuation", None),
            ("first_member_ms", "first member", SMALL_FIRST_SIZES),
        ):
            mine, theirs = ours[key], recipe[key]
            judged = timed and (sizes_ is None or n in sizes_)
            result.append(
                check(
                    f"{name}, N={n}",
                    f"<= +{TARGET_BESIDE_RECIPE_MS:g} ms" if judged else "reported",
                    f"{mine:.2f} vs recipe {theirs:.2f} ms",
                    mine - theirs <= TARGET_BESIDE_RECIPE_MS if judged else None,
                )
            )
        ratio = ours["cpu_ratio"]
        judged = timed and ratio is not None and n in SMALL_CPU_SIZES
        plain_cpu = row["plain"]["worker_cpu_us_per_member"]
        measured = (
            "not measurable here"
            if ratio is None
            else f"{ratio:.2f}x ({ours['worker_cpu_us_per_member']:.0f} vs"
            f" {plain_cpu:.0f} us)"
        )
        target = f"<= {TARGET_CPU_RATIO:.2f}x" if n in SMALL_CPU_SIZES else "reported"
        result.append(
            check(
                f"CPU/member vs plain, N={n}",
                target,
                measured,
                ratio <= TARGET_CPU_RATIO if judged else None,
            )
        )
    return result
