"""The command line's arguments, its usage errors and its exit codes."""

import argparse
from typing import NoReturn

from taskiq_fanin.groups.inspection import DEFAULT_LIST_LIMIT
from taskiq_fanin.model.config import DEFAULT_PREFIX
from taskiq_fanin.sweep.run import DEFAULT_BATCH

#: Exit codes, as ``--help`` lists them.
EXIT_OK, EXIT_MISSING, EXIT_USAGE, EXIT_STUCK, EXIT_UNREACHABLE = 0, 1, 2, 2, 3
#: The shell's code for a command stopped by Ctrl-C (128 + SIGINT).
EXIT_INTERRUPTED = 130

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
