"""``python -m benchmarks`` (``make bench``): every benchmark, one summary.

Runs deadlock, duplicates, overhead, scale and small_groups against one Redis with real
``taskiq worker`` processes, shows progress while they run, prints one table of
targets against measurements, and writes ``<out>/<benchmark>.json``,
``<out>/summary.json`` and ``<out>/summary.png``.

    python -m benchmarks [--quick] [--only overhead ...] [--out bench-results]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import _chart, deadlock, duplicates, overhead, scale, small_groups
from benchmarks._cli import (
    Benchmark,
    flat,
    interrupted,
    listed,
    redis_name,
    redis_option,
    session,
)
from benchmarks._report import (
    RESULTS_DIR,
    Check,
    Steps,
    console,
    print_checks,
    write_json,
)

BENCHMARKS: dict[str, Benchmark] = {
    bench.name: bench
    for bench in (
        deadlock.BENCHMARK,
        duplicates.BENCHMARK,
        overhead.BENCHMARK,
        scale.BENCHMARK,
        small_groups.BENCHMARK,
    )
}
#: Flags that set a field of every benchmark's ``Options`` that has it.
SHARED_FLAGS = ("repeats", "sizes", "wait_timeout", "seed", "dup_rate")


def parser() -> argparse.ArgumentParser:
    """Command-line options; the defaults are what ``make bench`` runs."""
    p = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="deadlock: 1 repeat; overhead: N=2,000 only, 3 pairs; duplicates: 40"
        " albums; scale: N=1,000 only; small_groups: N=20 and 200, 3 rounds: a"
        " smoke run of a few minutes",
    )
    p.add_argument("--only", nargs="+", choices=BENCHMARKS, default=list(BENCHMARKS))
    p.add_argument("--out", type=Path, default=RESULTS_DIR, help="output directory")
    p.add_argument("--repeats", type=int, help="deadlock, overhead and scale repeats")
    p.add_argument(
        "--sizes", type=listed(int), nargs="+", help="overhead and scale group sizes N"
    )
    p.add_argument("--wait-timeout", type=float, help="waiting parents' timeout (s)")
    p.add_argument("--seed", type=int, help="duplicates: seed")
    p.add_argument("--dup-rate", type=float, help="duplicates: share sent twice")
    p.add_argument(
        "--strict", action="store_true", help="exit 1 when a target is missed"
    )
    redis_option(p)
    return p


def configure(args: argparse.Namespace, bench: Benchmark) -> Any:
    """A benchmark's options from the command line (and ``--quick``)."""
    options = dataclasses.replace(bench.defaults, results_dir=args.out)
    if args.quick:
        options = dataclasses.replace(options, **bench.quick)
    names = {spec.name for spec in dataclasses.fields(options)}
    chosen = {
        name: flat(value)
        for name in SHARED_FLAGS
        if name in names and (value := getattr(args, name)) is not None
    }
    return dataclasses.replace(options, **chosen)


async def run_all(
    provider: Any, chosen: dict[str, Any], bars: Any
) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Run the chosen benchmarks one after the other.

    Returns their JSON documents, and the error of any that failed: one broken
    benchmark still leaves the others' results.
    """
    results: dict[str, dict[str, Any]] = {}
    errors: dict[str, str] = {}
    for number, (name, options) in enumerate(chosen.items(), start=1):
        # A bar appears when its benchmark starts: none for one not chosen,
        # none spinning at 0 for one still to come.
        label = f"{name} ({number}/{len(chosen)})" if len(chosen) > 1 else name
        steps = Steps(bars, label, options.steps)
        try:
            results[name] = await BENCHMARKS[name].run(provider, options, steps)
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


def run_kind(args: argparse.Namespace) -> str:
    """Quick, full (make bench's settings) or custom: what a reader must know first."""
    if args.quick:
        return "Quick run (a smoke test, not a measurement)"
    if all(getattr(args, name) is None for name in SHARED_FLAGS):
        return "Full run (make bench's settings)"
    return "Custom run"


def describe(ran: dict[str, Any]) -> str:
    """What ran: "deadlock 5 repeats; duplicates 100 albums; ..."."""
    return "; ".join(
        BENCHMARKS[name].describe(options) for name, options in ran.items()
    )


def all_checks(
    results: dict[str, dict[str, Any]], errors: dict[str, str]
) -> list[Check]:
    """Every target beside its measurement, in benchmark order."""
    checks: list[Check] = []
    for name, bench in BENCHMARKS.items():
        if name in results:
            checks.extend(bench.checks(results[name]))
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
    chosen = {
        name: configure(args, bench)
        for name, bench in BENCHMARKS.items()
        if name in args.only
    }
    began = time.perf_counter()
    outcome = session(
        args.redis, lambda provider, bars: run_all(provider, chosen, bars)
    )
    if outcome is None:
        return interrupted()
    provider, (results, errors), date = outcome
    seconds = time.perf_counter() - began
    checks = all_checks(results, errors)
    kind = run_kind(args)
    ran = f"{kind}: {describe({k: v for k, v in chosen.items() if k in results})}."
    notes = [f"{date}, {redis_name(provider)}. {ran}"]
    if not kind.startswith("Full"):
        full = {name: bench.defaults for name, bench in BENCHMARKS.items()}
        notes.append(f"make bench: {describe(full)}.")
    for name, data in results.items():
        write_json(args.out / f"{name}.json", data)
    write_json(
        args.out / "summary.json",
        {
            "redis": provider.kind,
            "quick": args.quick,
            "date": date,
            "settings": ran,
            "wall_seconds": round(seconds, 1),
            "checks": [dataclasses.asdict(check) for check in checks],
            "errors": errors,
            "missed": sum(1 for check in checks if check.met is False),
        },
    )
    title = f"taskiq-fanin benchmarks: {kind[0].lower()}{kind[1:]}"
    _chart.draw(args.out / "summary.png", results, title=title, settings=notes)
    legends = [bench.legend for name, bench in BENCHMARKS.items() if name in results]
    print_checks(checks, notes=notes + legends)
    console.print(
        f"Wrote {args.out}/*.json and {args.out}/summary.png in {seconds / 60:.1f} min."
    )
    if errors:
        return 2
    return 1 if args.strict and any(check.met is False for check in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
