"""``python -m benchmarks`` (``make bench``): all three benchmarks, one summary.

Runs deadlock, duplicates and overhead against one Redis with real ``taskiq
worker`` processes, shows progress while they run, prints one table of targets
against measurements, and writes ``<out>/{deadlock,duplicates,overhead,summary}
.json`` and ``<out>/summary.png``.

    python -m benchmarks [--quick] [--only overhead ...] [--out bench-results]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from benchmarks import _chart, _targets, deadlock, duplicates, overhead
from benchmarks._report import (
    RESULTS_DIR,
    Check,
    Steps,
    console,
    describe_run,
    print_checks,
    progress_bars,
    run_date,
    write_json,
)
from benchmarks._run import interrupted, redis_option
from local_redis import RedisProvider, provide_redis, stop_workers_at_exit

BENCHMARKS = ("deadlock", "duplicates", "overhead")
#: Overhead pairs of a quick run (make bench: ``overhead.FULL_REPEATS``).
QUICK_PAIRS = 3


def parser() -> argparse.ArgumentParser:
    """Command-line options; the defaults are what ``make bench`` runs."""
    p = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="deadlock: 1 repeat; overhead: N=2,000 only, 3 pairs; duplicates: 40"
        " albums: a smoke run of a minute or two",
    )
    p.add_argument("--only", nargs="+", choices=BENCHMARKS, default=list(BENCHMARKS))
    p.add_argument("--out", type=Path, default=RESULTS_DIR, help="output directory")
    p.add_argument("--repeats", type=int, help="deadlock and overhead repeats")
    p.add_argument("--sizes", type=int, nargs="+", help="overhead group sizes N")
    p.add_argument("--wait-timeout", type=float, help="waiting parents' timeout (s)")
    p.add_argument("--seed", type=int, help="duplicates: seed")
    p.add_argument("--dup-rate", type=float, help="duplicates: share sent twice")
    p.add_argument(
        "--strict", action="store_true", help="exit 1 when a target is missed"
    )
    redis_option(p)
    return p


def configure(
    args: argparse.Namespace,
) -> tuple[deadlock.Options, duplicates.Options, overhead.Options]:
    """Each benchmark's options from the command line."""
    dl = deadlock.Options(results_dir=args.out)
    dup = duplicates.Options(results_dir=args.out)
    ovh = overhead.Options(results_dir=args.out)
    if args.quick:
        dl = replace(dl, repeats=1, wait_timeout=2.0)
        dup = replace(dup, albums=40)
        # Fewer overhead pairs than make bench's, at its smaller size only:
        # the summary and the chart say so.
        ovh = replace(ovh, sizes=(2000,), repeats=QUICK_PAIRS, count_n=400, warmup=200)
    if args.repeats is not None:
        dl = replace(dl, repeats=args.repeats)
        ovh = replace(ovh, repeats=args.repeats)
    if args.sizes:
        ovh = replace(ovh, sizes=tuple(args.sizes))
    if args.wait_timeout is not None:
        dl = replace(dl, wait_timeout=args.wait_timeout)
    if args.seed is not None:
        dup = replace(dup, seed=args.seed)
    if args.dup_rate is not None:
        dup = replace(dup, dup_rate=args.dup_rate)
    return dl, dup, ovh


async def run_all(
    provider: RedisProvider,
    only: Sequence[str],
    options: tuple[deadlock.Options, duplicates.Options, overhead.Options],
    bars: Any,
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Run the chosen benchmarks one after the other.

    Returns their JSON documents, and the error of any that failed: one broken
    benchmark still leaves the others' results.
    """
    dl, dup, ovh = options
    plan = {
        "deadlock": (deadlock.run, dl, dl.steps),
        "duplicates": (duplicates.run, dup, dup.steps),
        "overhead": (overhead.run, ovh, ovh.steps),
    }
    chosen = [name for name in BENCHMARKS if name in only]
    results: dict[str, dict[str, Any]] = {}
    errors: dict[str, str] = {}
    for number, name in enumerate(chosen, start=1):
        run, opts, total = plan[name]
        # A bar appears when its benchmark starts: none for one not chosen,
        # none spinning at 0 for one still to come.
        label = f"{name} ({number}/{len(chosen)})" if len(chosen) > 1 else name
        steps = Steps(bars, label, total)
        try:
            results[name] = await run(provider, opts, steps)  # type: ignore[operator]
        except Exception as exc:
            if _cancelling():
                # Ctrl-C surfaced as another error (a connection closed under
                # a command): stop here, do not start the next benchmark.
                raise asyncio.CancelledError from exc
            errors[name] = f"{type(exc).__name__}: {exc}"
            steps.now(f"[red]failed: {type(exc).__name__}[/]")
            console.print_exception(max_frames=8)
    return results, errors


def _cancelling() -> bool:
    """Whether the running task is being cancelled (Ctrl-C)."""
    cancelling = getattr(asyncio.current_task(), "cancelling", None)  # 3.11+
    return cancelling is not None and int(cancelling()) > 0


def full_run() -> str:
    """What ``make bench`` runs, for a quick run to say what it is short of."""
    dl, dup, ovh = deadlock.Options(), duplicates.Options(), overhead.Options()
    sizes = " and ".join(f"{n:,}" for n in ovh.sizes)
    return (
        f"make bench: deadlock {dl.repeats} repeats; duplicates {dup.albums}"
        f" albums; overhead {ovh.repeats} pairs at N = {sizes}."
    )


def run_kind(args: argparse.Namespace) -> str:
    """Quick, full (make bench's settings) or custom: what a reader must know first."""
    if args.quick:
        return "Quick run (a smoke test, not a measurement)"
    custom = (args.repeats, args.sizes, args.wait_timeout, args.seed, args.dup_rate)
    if all(value is None for value in custom):
        return "Full run (make bench's settings)"
    return "Custom run"


def settings(results: dict[str, dict[str, Any]], *, kind: str, date: str) -> list[str]:
    """When the run was, on which Redis, and what it ran (and make bench's)."""
    lines = [f"{date}. {describe_run(results, kind=kind)}"]
    if not kind.startswith("Full"):
        lines.append(full_run())
    return lines


def legends(results: dict[str, dict[str, Any]]) -> list[str]:
    """What the short names in the table's rows stand for."""
    legend = {
        "deadlock": deadlock.LEGEND,
        "duplicates": duplicates.LEGEND,
        "overhead": overhead.LEGEND,
    }
    return [legend[name] for name in BENCHMARKS if name in results]


def all_checks(
    results: dict[str, dict[str, Any]], errors: dict[str, str]
) -> list[Check]:
    """Every target beside its measurement, in benchmark order."""
    makers = {
        "deadlock": _targets.deadlock_checks,
        "duplicates": _targets.duplicates_checks,
        "overhead": _targets.overhead_checks,
    }
    checks: list[Check] = []
    for name in BENCHMARKS:
        if name in results:
            checks.extend(makers[name](results[name]))
        elif name in errors:
            checks.append(
                # The type only: the traceback is above, the message in
                # summary.json.
                Check(name, "ran to the end", "yes", errors[name].split(":")[0], False)
            )
    return checks


def main(argv: Sequence[str] | None = None) -> int:
    """Run, report, write."""
    args = parser().parse_args(argv)
    options = configure(args)
    stop_workers_at_exit()
    date = run_date()
    began = time.perf_counter()
    try:
        with provide_redis(args.redis) as provider:
            console.print(provider.description)
            with progress_bars() as bars:
                results, errors = asyncio.run(
                    run_all(provider, args.only, options, bars)
                )
    except KeyboardInterrupt:
        return interrupted()
    seconds = time.perf_counter() - began
    checks = all_checks(results, errors)
    redis = f"{provider.kind} {provider.version}".strip()
    kind = run_kind(args)
    run = settings(results, kind=kind, date=f"{date}, {redis}")
    for name, data in results.items():
        write_json(args.out / f"{name}.json", data)
    write_json(
        args.out / "summary.json",
        {
            "redis": provider.kind,
            "quick": args.quick,
            "date": date,
            "settings": describe_run(results, kind=kind),
            "wall_seconds": round(seconds, 1),
            "checks": [asdict(check) for check in checks],
            "errors": errors,
            "missed": sum(1 for check in checks if check.met is False),
        },
    )
    _chart.draw(
        args.out / "summary.png",
        results.get("deadlock"),
        results.get("duplicates"),
        results.get("overhead"),
        title=f"taskiq-fanin benchmarks: {kind[0].lower()}{kind[1:]}",
        settings=run,
        fanin_margin=_targets.TARGET_FANIN_MARGIN,
        cpu_target=_targets.TARGET_CPU_RATIO,
        round_trips_target=_targets.TARGET_ROUND_TRIPS,
        celery_commands=_targets.CELERY_CHORD_COMMANDS,
        peers_source=overhead.PEERS_SOURCE,
    )
    print_checks(checks, notes=run + legends(results))
    console.print(
        f"Wrote {args.out}/*.json and {args.out}/summary.png in {seconds / 60:.1f} min."
    )
    missed = any(check.met is False for check in checks)
    if errors:
        return 2
    return 1 if args.strict and missed else 0


if __name__ == "__main__":
    sys.exit(main())
