"""The command line's arguments, its usage errors and its exit codes."""

import argparse
import enum
from typing import Any, NoReturn

from taskiq_fanin.domain.config import DEFAULT_PREFIX
from taskiq_fanin.groups.reading import DEFAULT_LIST_LIMIT
from taskiq_fanin.sweep.run import DEFAULT_BATCH


class ExitCode(enum.IntEnum):
    """What a command returns: one code per outcome, as ``--help`` lists them."""

    OK = 0
    NOT_FOUND = 1
    USAGE = 2
    STUCK = 3
    UNREACHABLE = 4
    #: The shell's code for a command stopped by Ctrl-C (128 + SIGINT).
    INTERRUPTED = 130


#: What each exit code means, for ``--help`` (every code has a line).
EXIT_MEANINGS = {
    ExitCode.OK: "done",
    ExitCode.NOT_FOUND: "status, watch: no group or chain has that id under the prefix",
    ExitCode.USAGE: "usage error: options or arguments that cannot run as given",
    ExitCode.STUCK: "sweep --fail-on-stuck: stuck groups or chains were found",
    ExitCode.UNREACHABLE: "Redis (or the broker) could not be reached, "
    "or replied with an error",
    ExitCode.INTERRUPTED: "interrupted (Ctrl-C)",
}

#: Seconds between two reads of ``watch`` and ``list --watch``, and the bounds.
DEFAULT_INTERVAL = 0.5
MIN_INTERVAL, MAX_INTERVAL = 0.05, 3600.0

#: Where the Redis URL and the prefix come from without --redis-url and
#: --prefix: the first of these set (and not empty). A flag wins over them.
URL_VARIABLES = ("TASKIQ_FANIN_REDIS_URL", "REDIS_URL")
PREFIX_VARIABLES = ("TASKIQ_FANIN_PREFIX",)

#: The options every command takes, before or after the command's name.
GLOBAL_OPTIONS = "--redis-url, --cluster, --prefix, --broker and --json"

EPILOG = f"""\
{GLOBAL_OPTIONS} go before or after the command:
`{{prog}} --redis-url URL list` and `{{prog}} list --redis-url URL` are the same.
Without --broker, the commands read Redis through a FanInMiddleware of their
own (--redis-url, else $TASKIQ_FANIN_REDIS_URL, else $REDIS_URL; --prefix, else
$TASKIQ_FANIN_PREFIX, else "{DEFAULT_PREFIX}": set them once, a flag wins); with
--cluster, the URL is any one node of a Redis Cluster; a primary behind
Sentinel is redis+sentinel://host[:port][,host[:port]...]/<master name>[/<db>]. A sweep
that acts (--redrive, --give-up, --apply) kicks tasks, so it needs your broker
instead: --broker module.path:variable, as for `taskiq worker`.

status ID shows the group with that id, else the chain. When there is neither,
it says so in one line on stderr and exits {ExitCode.NOT_FOUND:d}; with --json it also
prints null, so that stdout is one JSON document whenever Redis answered.
watch ID follows it live and ends by itself when it has ended, with the exit
code of status; with --json, one JSON object a line, each time it changed.

exit codes:
""" + "\n".join(f"  {code:>3d}  {meaning}" for code, meaning in EXIT_MEANINGS.items())


class UsageError(Exception):
    """A command line that cannot run as given (``ExitCode.USAGE``)."""


class NotFoundError(Exception):
    """The id names no group and no chain (``ExitCode.NOT_FOUND``)."""


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line, argparse's as well as ours."""

    def error(self, message: str) -> NoReturn:
        """Print ``message`` on one line and exit with the usage error code."""
        self.exit(ExitCode.USAGE, f"{self.prog}: error: {message} (see --help)\n")


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) == 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer")
    return int(text)


def _interval(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not MIN_INTERVAL <= seconds <= MAX_INTERVAL:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number of seconds from {MIN_INTERVAL} to {MAX_INTERVAL}"
        )
    return seconds


def _add_interval(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--interval",
        type=_interval,
        default=DEFAULT_INTERVAL,
        metavar="SECONDS",
        help=f"seconds between reads (default: {DEFAULT_INTERVAL})",
    )


def _add_global_options(parser: argparse.ArgumentParser, *, after: bool) -> None:
    """The options every command takes, on the main parser or on a command's.

    A command's copies default to ``SUPPRESS``: argparse copies every default of
    a command's parser over the values parsed before the command's name, so a
    real default there would undo ``taskiq-fanin --json status ID``.
    """

    def default(value: Any) -> Any:
        return argparse.SUPPRESS if after else value

    parser.add_argument(
        "--redis-url",
        default=default(None),
        help="Redis of the groups and chains (default: $TASKIQ_FANIN_REDIS_URL, "
        "else $REDIS_URL); "
        "redis+sentinel://... for a primary behind Sentinel",
    )
    parser.add_argument(
        "--cluster",
        action="store_true",
        default=default(False),
        help="--redis-url is a node of a Redis Cluster (any one: it finds the rest)",
    )
    parser.add_argument(
        "--prefix",
        default=default(None),
        help=f'key prefix (default: $TASKIQ_FANIN_PREFIX, else "{DEFAULT_PREFIX}")',
    )
    parser.add_argument(
        "--broker",
        metavar="MODULE:VARIABLE",
        default=default(None),
        help="your broker with its FanInMiddleware, instead of --redis-url/--prefix "
        "(a cluster broker's middleware says cluster=True itself)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        default=default(False),
        help="print one JSON document",
    )


def build_parser(prog: str = "taskiq-fanin") -> argparse.ArgumentParser:
    """The parser of every command; the global options go before or after it."""
    parser = _Parser(
        prog=prog,
        description="Status, live watch, listing and sweep of groups and chains.",
        epilog=EPILOG.format(prog=prog),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_global_options(parser, after=False)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, summary: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(
            name,
            help=summary,
            description=summary[0].upper() + summary[1:] + ".",
            epilog=EPILOG.format(prog=prog),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        _add_global_options(sub, after=True)
        return sub

    status = command(
        "status", "a group's counts, or a chain's steps, state, times and error"
    )
    status.add_argument("id", metavar="ID", help="a group id or a chain id")
    listing = command(
        "list", "the groups and chains not yet finished, soonest due first"
    )
    listing.add_argument(
        "--stuck",
        action="store_true",
        help="only overdue groups and stuck chains (what sweep counts as stuck)",
    )
    listing.add_argument(
        "--limit",
        type=_positive,
        default=DEFAULT_LIST_LIMIT,
        help="at most N groups and N chains",
    )
    listing.add_argument(
        "--chains",
        action="store_true",
        help="only chains, with how many run each version (may an old handler go?)",
    )
    listing.add_argument(
        "--watch",
        action="store_true",
        help="read and show the list again and again, until Ctrl-C "
        "(with --json: one JSON document a line, each time it changed)",
    )
    _add_interval(listing)
    watching = command(
        "watch",
        "a group's bar, or a chain's steps, live until it ends",
    )
    watching.add_argument("id", metavar="ID", help="a group id or a chain id")
    _add_interval(watching)
    sweeping = command("sweep", "find the groups and chains that stopped moving")
    modes = sweeping.add_mutually_exclusive_group()
    for flag, text in (
        ("--dry-run", "say what the sweep would do, write nothing (the default)"),
        (
            "--redrive",
            "kick again the missing members of each stuck group and the step of "
            "each stuck chain, never a task your broker does not know",
        ),
        (
            "--give-up",
            "record missing members as lost, run the continuations; "
            "fail each stuck chain (ChainGivenUpError, compensations run)",
        ),
        (
            "--apply",
            "act by each group's own sweep policy (a chain's: the middleware's)",
        ),
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
        "--fail-on-stuck",
        action="store_true",
        help=f"exit {ExitCode.STUCK:d} if groups or chains are stuck",
    )
    _add_web(command("web", "a live web page of the groups and chains"))
    return parser


def _add_web(web: argparse.ArgumentParser) -> None:
    """``web``'s own options (it needs the ``web`` extra)."""
    web.add_argument("--host", default="127.0.0.1", help="address to listen on")
    web.add_argument("--port", type=_port, default=8000, help="port to listen on")
    web.add_argument(
        "--allow-actions",
        action="store_true",
        help="show cancel (and, with --broker, re-drive) buttons; each action "
        "must carry the token",
    )
    web.add_argument(
        "--token",
        default=None,
        help="the token actions need (default: $TASKIQ_FANIN_WEB_TOKEN)",
    )


def _port(text: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port")
    return int(text)
