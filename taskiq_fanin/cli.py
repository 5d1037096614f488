"""``taskiq-fanin``: a group's status, the open groups, and the sweep, from a shell.

Nothing waits on a group, so an operator needs a way to look at one without writing
Python, and cron needs an exit code. Each command prints a table, or one JSON
document with ``--json``. ``taskiq fanin ...`` runs the same commands.
"""

import argparse
import asyncio
import importlib
import json
import logging
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NoReturn

from redis.exceptions import RedisError
from rich import box
from rich.console import Console
from rich.table import Table
from taskiq import AsyncBroker
from taskiq.abc.cmd import TaskiqCMD

from taskiq_fanin.config import DEFAULT_PREFIX
from taskiq_fanin.errors import FanInError
from taskiq_fanin.inspection import DEFAULT_LIST_LIMIT, list_groups
from taskiq_fanin.keys import sweep_lock_key
from taskiq_fanin.middleware import FanInMiddleware, find_fanin
from taskiq_fanin.models import GroupState, GroupStatus, SweepPolicy
from taskiq_fanin.sweep import DEFAULT_BATCH, sweep
from taskiq_fanin.sweep_report import Finding, SweepReport

#: Exit codes, as ``--help`` lists them.
EXIT_OK, EXIT_MISSING, EXIT_USAGE, EXIT_STUCK, EXIT_UNREACHABLE = 0, 1, 2, 2, 3
#: The shell's code for a command stopped by Ctrl-C (128 + SIGINT).
EXIT_INTERRUPTED = 130
#: Runs of missing members (``0-29``) a table shows; ``--json`` has them all.
SHOWN_RUNS = 6
#: One command: reads (or sweeps) through the middleware, returns the exit code.
Command = Callable[[FanInMiddleware, argparse.Namespace], Awaitable[int]]
#: What is started and stopped around a command: a broker, or a lone middleware.
Startable = AsyncBroker | FanInMiddleware
#: Sweep modes that override each group's own policy (they are named after it).
OVERRIDES = {SweepPolicy.REDRIVE.value, SweepPolicy.GIVE_UP.value}

EPILOG = """\
Options go after the command: taskiq-fanin status GROUP_ID --redis-url URL.
Without --broker, the commands read Redis through a FanInMiddleware of their own
(--redis-url, default $REDIS_URL; --prefix, default "fanin"). A sweep that acts
(--redrive, --give-up, --apply) kicks tasks, so it needs your broker instead:
--broker module.path:variable, as for `taskiq worker`.

exit codes:
  0  done
  1  status: the group is missing
  2  usage error; sweep --fail-on-stuck: stuck groups were found
  3  Redis (or the broker) could not be reached, or replied with an error
"""


class UsageError(Exception):
    """A command line that cannot run as given (exit code 2)."""


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line, argparse's as well as ours."""

    def error(self, message: str) -> NoReturn:
        """Print ``message`` on one line and exit with the usage error code."""
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see --help)\n")


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return int(text)


def build_parser(prog: str = "taskiq-fanin") -> argparse.ArgumentParser:
    """The parser of every command; the common options go after the command."""
    common = _Parser(add_help=False)
    common.add_argument("--redis-url", help="Redis of the groups (default: $REDIS_URL)")
    common.add_argument("--prefix", help=f'key prefix (default: "{DEFAULT_PREFIX}")')
    common.add_argument(
        "--broker",
        metavar="MODULE:VARIABLE",
        help="your broker with its FanInMiddleware, instead of --redis-url/--prefix",
    )
    common.add_argument("--json", action="store_true", help="print one JSON document")
    parser = _Parser(
        prog=prog,
        description="Status, listing and sweep of taskiq-fanin groups.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, summary: str) -> argparse.ArgumentParser:
        return commands.add_parser(
            name,
            parents=[common],
            help=summary,
            description=summary[0].upper() + summary[1:] + ".",
            epilog=EPILOG,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )

    status = command("status", "counts, state and times of one group")
    status.add_argument("group_id", metavar="GROUP_ID")
    listing = command("list", "the groups not yet finished, soonest due first")
    listing.add_argument("--stuck", action="store_true", help="only overdue groups")
    listing.add_argument(
        "--limit", type=_positive, default=DEFAULT_LIST_LIMIT, help="at most N groups"
    )
    sweeping = command("sweep", "find the groups that stopped moving")
    modes = sweeping.add_mutually_exclusive_group()
    for flag, text in (
        ("--dry-run", "say what the sweep would do, write nothing (the default)"),
        ("--redrive", "kick again the missing members of each stuck group"),
        ("--give-up", "record missing members as lost, run the continuations"),
        ("--apply", "act by each group's own sweep policy"),
    ):
        const = flag[2:].replace("-", "_")
        modes.add_argument(
            flag, dest="mode", action="store_const", const=const, help=text
        )
    sweeping.set_defaults(mode="dry_run")
    sweeping.add_argument(
        "--batch", type=_positive, default=DEFAULT_BATCH, help="at most N due groups"
    )
    sweeping.add_argument(
        "--fail-on-stuck", action="store_true", help="exit 2 if groups are stuck"
    )
    return parser


def _import_broker(spec: str) -> AsyncBroker:
    """Import ``module.path:variable`` from the current directory, as taskiq does."""
    module_name, _, variable = spec.partition(":")
    if not module_name or not variable:
        raise UsageError(f"--broker {spec!r}: expected module.path:variable")
    if str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"--broker {spec!r}: {exc}") from None
    broker = getattr(module, variable, None)
    if not isinstance(broker, AsyncBroker):
        kind = type(broker).__name__
        raise UsageError(f"--broker {spec!r} is a {kind}, not a taskiq broker")
    return broker


def _open(args: argparse.Namespace) -> tuple[FanInMiddleware, Startable]:
    """The FanInMiddleware to use, and the broker (or itself) to start and stop."""
    if args.broker:
        if args.redis_url or args.prefix:
            raise UsageError("--broker brings its own Redis and prefix: drop the rest")
        broker = _import_broker(args.broker)
        return find_fanin(broker), broker
    if args.command == "sweep" and args.mode != "dry_run":
        flag = "--" + args.mode.replace("_", "-")
        raise UsageError(f"sweep {flag} kicks tasks: it needs --broker MODULE:VARIABLE")
    url = args.redis_url or os.environ.get("REDIS_URL")
    if not url:
        raise UsageError("no Redis: pass --redis-url or set REDIS_URL")
    fanin = FanInMiddleware(url, prefix=args.prefix or DEFAULT_PREFIX)
    return fanin, fanin


# -- commands -------------------------------------------------------------------


async def _status(fanin: FanInMiddleware, args: argparse.Namespace) -> int:
    status = await fanin.status(args.group_id)
    now = datetime.now(timezone.utc)
    if args.json:
        _print_json(_status_doc(status, now))
    else:
        _print_table(_status_table(status, now))
    return EXIT_MISSING if status.state is GroupState.MISSING else EXIT_OK


async def _list(fanin: FanInMiddleware, args: argparse.Namespace) -> int:
    statuses = await list_groups(fanin, stuck=args.stuck, limit=args.limit)
    now = datetime.now(timezone.utc)
    which = "stuck" if args.stuck else "open"
    if args.json:
        _print_json([_status_doc(status, now) for status in statuses])
    elif statuses:
        title = f"{which.capitalize()} groups under {fanin.config.prefix!r}"
        _print_table(_list_table(statuses, now, title))
    else:
        print(f"No {which} groups under {fanin.config.prefix!r}.")
    return EXIT_OK


async def _sweep(fanin: FanInMiddleware, args: argparse.Namespace) -> int:
    dry_run = args.mode == "dry_run"
    policy = SweepPolicy(args.mode) if args.mode in OVERRIDES else None
    report = await sweep(fanin, policy=policy, dry_run=dry_run, batch=args.batch)
    if args.json:
        _print_json(report.model_dump(mode="json"))
    else:
        if report.findings:
            _print_table(_sweep_table(report.findings, dry_run))
        print(_sweep_summary(report, fanin.config.prefix))
    return EXIT_STUCK if args.fail_on_stuck and report.stuck else EXIT_OK


COMMANDS: dict[str, Command] = {"status": _status, "list": _list, "sweep": _sweep}


# -- output ---------------------------------------------------------------------


def _print_json(document: object) -> None:
    print(json.dumps(document, indent=2))


def _print_table(table: Table) -> None:
    console = Console()
    if not console.is_terminal:  # a pipe, a file, cron's mail: one line per row
        unbounded = console.options.update_width(sys.maxsize)
        width = console.measure(table, options=unbounded).maximum
        console.width = max(console.width, width)
    console.print(table)


def _status_doc(status: GroupStatus, now: datetime) -> dict[str, Any]:
    """The model as JSON, with its age and lateness at one ``now``."""
    return {
        **status.model_dump(mode="json"),
        "age_seconds": status.age_seconds(now),
        "overdue": status.overdue(now),
    }


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def _time(moment: datetime | None) -> str:
    return "-" if moment is None else f"{moment:%Y-%m-%d %H:%M:%S} UTC"


def _overdue_by(status: GroupStatus, now: datetime) -> str:
    if status.deadline is None or not status.overdue(now):
        return ""
    return _duration((now - status.deadline).total_seconds())


def _members(indexes: list[int]) -> str:
    """Member indexes as runs (``0-29, 31``), the first few of them."""
    runs: list[list[int]] = []
    for index in indexes:
        if runs and index == runs[-1][1] + 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    shown = [f"{a}-{b}" if b > a else str(a) for a, b in runs[:SHOWN_RUNS]]
    more = sum(b - a + 1 for a, b in runs[SHOWN_RUNS:])
    return ", ".join(shown) + (f" (+{more} more)" if more else "")


def _status_table(status: GroupStatus, now: datetime) -> Table:
    table = Table(title=f"Group {status.group_id}", show_header=False, box=box.SIMPLE)
    table.add_column(style="bold")
    table.add_column()
    overdue = _overdue_by(status, now)
    policies = [p.value for p in (status.failure_policy, status.sweep_policy) if p]
    for name, value in (
        ("state", status.state.value + (f" (overdue {overdue})" if overdue else "")),
        ("total", status.total),
        ("done", status.done),
        ("failed", status.failed),
        ("lost", status.lost),
        ("pending", status.pending),
        ("planned", "yes" if status.planned else "no"),
        ("redrives", status.redrives),
        ("created", _time(status.created)),
        ("deadline", _time(status.deadline)),
        ("age", _duration(status.age_seconds(now))),
        ("policies (failure, sweep)", ", ".join(policies) or "-"),
    ):
        table.add_row(name, str(value))
    return table


def _list_table(statuses: list[GroupStatus], now: datetime, title: str) -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAD)
    table.add_column("group", no_wrap=True)  # whole, to be copied
    table.add_column("state")
    for header in ("done/failed/total", "pending", "age", "overdue"):
        table.add_column(header, justify="right")
    for status in statuses:
        table.add_row(
            status.group_id,
            status.state.value,
            f"{status.done}/{status.failed}/{status.total}",
            str(status.pending),
            _duration(status.age_seconds(now)),
            _overdue_by(status, now),
        )
    return table


def _sweep_table(findings: list[Finding], dry_run: bool) -> Table:
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("group", no_wrap=True)
    for header in ("kind", "action", "done/failed/total", "missing members"):
        table.add_column(header)
    for header in ("age", "overdue"):
        table.add_column(header, justify="right")
    table.add_column("note")
    for finding in findings:
        action = finding.action.value
        if dry_run:
            action = f"would {action}"
        elif not finding.applied:
            action = f"{action} (not applied)"
        table.add_row(
            finding.group_id,
            finding.kind.value,
            action,
            f"{finding.done}/{finding.failed}/{finding.total}",
            _members(finding.missing),
            _duration(finding.age_seconds),
            _duration(finding.overdue_seconds),
            finding.note,
        )
    return table


def _sweep_summary(report: SweepReport, prefix: str) -> str:
    if report.skipped:
        lock = sweep_lock_key(prefix)
        return f"Another sweep holds the lock ({lock}): nothing was done."

    def count(number: int, noun: str) -> str:
        return f"{number} {noun}{'' if number == 1 else 's'}"

    summary = (
        f"Examined {count(report.examined, 'due group')}: "
        f"{count(len(report.findings), 'finding')}, {len(report.stuck)} stuck."
    )
    return f"Dry run, nothing written. {summary}" if report.dry_run else summary


# -- entry points ---------------------------------------------------------------


async def _run(args: argparse.Namespace) -> int:
    fanin, owner = _open(args)
    try:
        try:
            await owner.startup()
        except ValueError as exc:  # a malformed Redis URL
            raise UsageError(str(exc)) from None
        return await COMMANDS[args.command](fanin, args)
    finally:
        await owner.shutdown()


def main(argv: Sequence[str] | None = None, *, prog: str = "taskiq-fanin") -> int:
    """Run one command line and return its exit code (listed by ``--help``)."""
    try:
        args = build_parser(prog).parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error already printed
        return exc.code if isinstance(exc.code, int) else EXIT_OK
    # The tables say what the sweep found; its warnings would say it twice.
    logging.basicConfig(
        level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        return asyncio.run(_run(args))
    except (UsageError, FanInError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except RedisError as exc:
        print(f"{prog}: Redis: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except OSError as exc:  # the user's broker, when it is not on Redis
        print(f"{prog}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


class FanInCMD(TaskiqCMD):
    """``taskiq fanin ...``: taskiq's CLI finds it in the ``taskiq_cli`` group."""

    short_help = "Status, listing and sweep of taskiq-fanin groups"

    def exec(self, args: Sequence[str]) -> int:
        """Run the command line that follows ``taskiq fanin``."""
        return main(args, prog="taskiq fanin")


if __name__ == "__main__":
    raise SystemExit(main())
