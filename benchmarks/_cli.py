"""A benchmark as the command line sees it: its options, its session, its report.

``python -m benchmarks.<name>`` and ``python -m benchmarks`` both go through
here: flags from the fields of a benchmark's ``Options``, one Redis for the
session, progress bars, every worker stopped on Ctrl-C, then JSON and a table.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks._report import (
    RESULTS_DIR,
    Check,
    Steps,
    console,
    print_checks,
    progress_bars,
    run_date,
    write_json,
)
from local_redis import (
    RedisProvider,
    provide_redis,
    stop_all_workers,
    stop_workers_at_exit,
)

BenchRun = Callable[[RedisProvider, Any, Steps], Coroutine[Any, Any, dict[str, Any]]]


def listed(kind: Callable[[str], Any]) -> Callable[[str], list[Any]]:
    """A flag's values, as one word or several, commas between them: "1000,10000"."""

    def parse(text: str) -> list[Any]:
        return [kind(part) for part in text.split(",") if part]

    parse.__name__ = getattr(kind, "__name__", "value")  # for argparse's errors
    return parse


def flat(value: Any) -> Any:
    """A listed flag's words (lists, from :func:`listed`) as one tuple."""
    if isinstance(value, list):
        return tuple(item for word in value for item in word)
    return value


def flag(default: Any, text: str | None = None, *, nargs: str = "+") -> Any:
    """An ``Options`` field that is a flag of the benchmark run alone too.

    ``--max-async-tasks`` sets ``max_async_tasks``; a tuple default takes a list
    (``nargs``, or commas: ``--sizes 1000,10000``) of the type of its values.
    """
    return field(default=default, metadata={"help": text, "nargs": nargs})


@dataclass(frozen=True)
class Benchmark:
    """One benchmark: how it runs, what it is judged on, how a run is described."""

    name: str
    doc: str
    run: BenchRun
    defaults: Any
    checks: Callable[[dict[str, Any]], list[Check]]
    #: What the short names in its rows stand for, under the table.
    legend: str
    #: ``Options`` for ``python -m benchmarks --quick``.
    quick: dict[str, Any]
    #: What a run with these options ran: "deadlock 5 repeats".
    describe: Callable[[Any], str]

    def parser(self) -> argparse.ArgumentParser:
        """The benchmark's flags, from its ``Options``; then ``--json``."""
        parser = argparse.ArgumentParser(
            prog=f"python -m benchmarks.{self.name}",
            description=self.doc.split("\n\n", maxsplit=1)[0],
        )
        for spec in dataclasses.fields(self.defaults):
            if "help" not in spec.metadata:
                continue
            default = getattr(self.defaults, spec.name)
            many = isinstance(default, tuple)
            parser.add_argument(
                "--" + spec.name.replace("_", "-"),
                type=listed(type(default[0])) if many else type(default),
                nargs=spec.metadata["nargs"] if many else None,
                default=[list(default)] if many else default,
                help=spec.metadata["help"],
            )
        parser.add_argument(
            "--json",
            type=Path,
            default=RESULTS_DIR / f"{self.name}.json",
            help="where to write the results",
        )
        redis_option(parser)
        return parser

    def main(self, argv: Sequence[str] | None = None) -> int:
        """``python -m benchmarks.<name>``: the benchmark alone, its table, its JSON."""
        args = self.parser().parse_args(argv)
        chosen = {
            spec.name: getattr(args, spec.name)
            for spec in dataclasses.fields(self.defaults)
            if "help" in spec.metadata
        }
        options = dataclasses.replace(
            self.defaults,
            results_dir=args.json.parent,
            **{name: flat(value) for name, value in chosen.items()},
        )

        async def body(provider: RedisProvider, bars: Any) -> dict[str, Any]:
            return await self.run(
                provider, options, Steps(bars, self.name, options.steps)
            )

        outcome = session(args.redis, body)
        if outcome is None:
            return interrupted()
        provider, data, date = outcome
        write_json(args.json, data)
        notes = [f"{date}, {redis_name(provider)}. Run: {self.describe(options)}."]
        print_checks(self.checks(data), title=self.name, notes=[*notes, self.legend])
        console.print(f"JSON: {args.json}")
        return 0


def session(
    redis: str, body: Callable[[RedisProvider, Any], Coroutine[Any, Any, Any]]
) -> tuple[RedisProvider, Any, str] | None:
    """Run ``body`` on one Redis with progress bars; ``None`` after Ctrl-C.

    Returns the provider, what ``body`` returned and the date the run began.
    """
    stop_workers_at_exit()
    date = run_date()
    try:
        with provide_redis(redis) as provider:
            console.print(provider.description)
            with progress_bars() as bars:
                return provider, asyncio.run(body(provider, bars)), date
    except KeyboardInterrupt:
        return None


def redis_name(provider: RedisProvider) -> str:
    """The kind of Redis and its version: "redis-server 7.0.15"."""
    return f"{provider.kind} {provider.version}".strip()


def interrupted() -> int:
    """After Ctrl-C: make sure every worker is gone, say so; the exit status."""
    stop_all_workers()
    print(
        "interrupted: every worker and Redis started here is stopped", file=sys.stderr
    )
    return 130


def redis_option(parser: argparse.ArgumentParser) -> None:
    """``--redis auto|server|fake``: hidden, for trying the fallbacks."""
    parser.add_argument(
        "--redis", choices=("auto", "server", "fake"), default="auto",
        help=argparse.SUPPRESS,
    )  # fmt: skip
