"""``taskiq-fanin``: a group's or a chain's status, once or live; lists; the sweep.

Nothing waits on a group or a chain, so an operator needs a way to look at one
without writing Python, and cron needs an exit code. Each command prints a table,
or one JSON document with ``--json`` (``watch``: one a line, as it changes).
``taskiq fanin ...`` runs the same commands.
"""

import argparse
import asyncio
import logging
import signal
import sys
import threading
from collections.abc import Sequence

from redis.exceptions import MovedError, RedisClusterException, RedisError
from taskiq.abc.cmd import TaskiqCMD

from taskiq_fanin.cli.commands import COMMANDS, check_web, open_target
from taskiq_fanin.cli.output import ReaderGoneError
from taskiq_fanin.cli.parser import (
    ExitCode,
    NotFoundError,
    UsageError,
    build_parser,
)
from taskiq_fanin.domain.exceptions import FanInError, RedisUnreachableError


async def _run(args: argparse.Namespace) -> int:
    if args.command == "web":
        check_web(args)
    fanin, owner = open_target(args)
    try:
        try:
            await owner.startup()
        except ValueError as exc:  # a malformed Redis URL
            raise UsageError(str(exc)) from None
        return await COMMANDS[args.command](fanin, args)
    finally:
        await owner.shutdown()


def _interruptible() -> None:
    """SIGINT ends a command, even one started with it ignored.

    A shell that starts a command in the background (a script's ``&``, a CI
    job) hands it SIGINT ignored, and Python then raises no
    ``KeyboardInterrupt``: ``watch`` and ``list --watch``, which run until
    interrupted, could then be stopped by ``kill -INT`` no more.
    """
    ignored = signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    if ignored and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.default_int_handler)


def main(argv: Sequence[str] | None = None, *, prog: str = "taskiq-fanin") -> int:
    """Run one command line and return its exit code (listed by ``--help``)."""
    try:
        args = build_parser(prog).parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error already printed
        return int(exc.code) if isinstance(exc.code, int) else ExitCode.OK
    _interruptible()
    # The tables say what the sweep found; its warnings would say it twice.
    logging.basicConfig(
        level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        return int(asyncio.run(_run(args)))
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    except ReaderGoneError:  # ``... | head``: it read what it wanted
        return ExitCode.OK
    except (
        NotFoundError,
        UsageError,
        FanInError,
        RedisError,
        RedisClusterException,  # a cluster none of whose nodes answer
        OSError,
    ) as exc:
        return _failed(exc, prog)


def _failed(exc: Exception, prog: str) -> ExitCode:
    """Say on one line of stderr why the command stopped; return its exit code."""
    if isinstance(exc, NotFoundError):
        message, code = str(exc), ExitCode.NOT_FOUND
    elif isinstance(exc, RedisUnreachableError):
        message, code = f"Redis: {exc}", ExitCode.UNREACHABLE
    elif isinstance(exc, UsageError | FanInError):
        message, code = f"error: {exc}", ExitCode.USAGE
    elif isinstance(exc, MovedError):  # a plain client's command on a cluster
        message = f"Redis: MOVED {exc}: this Redis is a Cluster node: pass --cluster"
        code = ExitCode.UNREACHABLE
    elif isinstance(exc, RedisError | RedisClusterException):
        message, code = f"Redis: {exc}", ExitCode.UNREACHABLE
    else:  # OSError: the user's broker, when it is not on Redis
        message, code = f"{type(exc).__name__}: {exc}", ExitCode.UNREACHABLE
    print(f"{prog}: {message}", file=sys.stderr)
    return code


class FanInCMD(TaskiqCMD):
    """``taskiq fanin ...``: taskiq's CLI finds it in the ``taskiq_cli`` group."""

    short_help = "Status, watch, listing and sweep of taskiq-fanin groups and chains"

    def exec(self, args: Sequence[str]) -> int:
        """Run the command line that follows ``taskiq fanin``."""
        return main(args, prog="taskiq fanin")
