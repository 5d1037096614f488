"""The commands: how each reads (or sweeps) and what it prints and returns."""

import argparse
import importlib
import importlib.util
import os
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text
from taskiq import AsyncBroker

from taskiq_fanin.api.broker import find_fanin
from taskiq_fanin.api.control import list_chains, list_groups, status
from taskiq_fanin.api.sweep_task import sweep
from taskiq_fanin.cli.output import (
    chain_doc,
    chain_list_table,
    chain_table,
    list_table,
    print_json,
    print_table,
    print_text,
    status_doc,
    status_table,
    sweep_summary,
    sweep_table,
    versions_table,
)
from taskiq_fanin.cli.parser import (
    PREFIX_VARIABLES,
    URL_VARIABLES,
    ExitCode,
    NotFoundError,
    UsageError,
)
from taskiq_fanin.cli.watch_loops import watch, watch_list
from taskiq_fanin.domain.config import DEFAULT_PREFIX
from taskiq_fanin.domain.results import GroupState, GroupStatus, SweepPolicy
from taskiq_fanin.worker.middleware import FanInMiddleware

#: One command: reads (or sweeps) through the middleware, returns the exit code.
Command = Callable[[FanInMiddleware, argparse.Namespace], Awaitable[int]]
#: What is started and stopped around a command: a broker, or a lone middleware.
Startable = AsyncBroker | FanInMiddleware
#: Where ``taskiq-fanin web`` reads its token when ``--token`` is not given.
TOKEN_ENV = "TASKIQ_FANIN_WEB_TOKEN"
#: What the web page needs beyond the core: the ``web`` extra.
WEB_MODULES = ("starlette", "uvicorn")
#: Sweep modes that override each group's own policy (they are named after it).
OVERRIDES = {SweepPolicy.REDRIVE.value, SweepPolicy.GIVE_UP.value}


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


def open_target(args: argparse.Namespace) -> tuple[FanInMiddleware, Startable]:
    """The FanInMiddleware to use, and the broker (or itself) to start and stop."""
    if args.broker:
        if args.redis_url or args.prefix or args.cluster:
            raise UsageError("--broker brings its own Redis and prefix: drop the rest")
        broker = _import_broker(args.broker)
        return find_fanin(broker), broker
    if args.command == "sweep" and args.mode != "dry_run":
        flag = "--" + args.mode.replace("_", "-")
        raise UsageError(f"sweep {flag} kicks tasks: it needs --broker MODULE:VARIABLE")
    url = args.redis_url or _from_env(URL_VARIABLES)
    if not url:
        raise UsageError(
            f"no Redis: pass --redis-url or set {' or '.join(URL_VARIABLES)}"
        )
    prefix = args.prefix or _from_env(PREFIX_VARIABLES) or DEFAULT_PREFIX
    fanin = FanInMiddleware(url, cluster=args.cluster, prefix=prefix)
    return fanin, fanin


def _from_env(names: tuple[str, ...]) -> str | None:
    """The first of these environment variables that is set and not empty."""
    return next((os.environ[n] for n in names if os.environ.get(n)), None)


async def _redis_now(fanin: FanInMiddleware) -> datetime:
    """Redis's clock: ages and lateness are on it, as the times they compare."""
    return datetime.fromtimestamp(await fanin.context.redis_now(), tz=timezone.utc)


async def _status(fanin: FanInMiddleware, args: argparse.Namespace) -> int:
    found = await status(fanin, args.id)  # resolve(): a group first, then a chain
    now = await _redis_now(fanin)
    if isinstance(found, GroupStatus):
        if found.state is GroupState.MISSING:
            if args.json:
                print_json(None)  # stdout stays one JSON document
            prefix = fanin.config.prefix
            raise NotFoundError(
                f'no group or chain "{args.id}" under prefix "{prefix}"'
            )
        document = status_doc(found, now)
        table: RenderableType = status_table(found, now)
    else:
        document, table = chain_doc(found, now), chain_table(found, now)
    if args.json:
        print_json(document)
    else:
        print_table(table)
    return ExitCode.OK


async def _list(fanin: FanInMiddleware, args: argparse.Namespace) -> int:
    async def read() -> tuple[Any, RenderableType]:
        return await _listing(fanin, args)

    if args.watch:
        return await watch_list(read, interval=args.interval, as_json=args.json)
    document, drawn = await read()
    if args.json:
        print_json(document)
    else:
        print_table(drawn)
    return ExitCode.OK


async def _listing(
    fanin: FanInMiddleware, args: argparse.Namespace
) -> tuple[Any, RenderableType]:
    """One read of the list: its JSON document, and its tables (or a line)."""
    now = await _redis_now(fanin)
    options = {"stuck": args.stuck, "limit": args.limit, "now": now}
    groups = [] if args.chains else await list_groups(fanin, **options)
    chains = await list_chains(fanin, **options)
    which, prefix = ("stuck" if args.stuck else "open"), fanin.config.prefix
    kinds = "chains" if args.chains else "groups or chains"
    documents = [status_doc(status, now) for status in groups]
    documents += [chain_doc(status, now) for status in chains]
    if not groups and not chains:
        return documents, Text(f"No {which} {kinds} under {prefix!r}.")
    tables: list[RenderableType] = []
    if groups:
        title = f"{which.capitalize()} groups under {prefix!r}"
        tables.append(list_table(groups, now, title))
    if chains:
        title = f"{which.capitalize()} chains under {prefix!r}"
        tables.append(chain_list_table(chains, now, title))
    if chains and args.chains:
        tables.append(versions_table(chains, "By version"))
    return documents, Group(*tables)


async def _watch(fanin: FanInMiddleware, args: argparse.Namespace) -> int:
    return await watch(fanin, args.id, interval=args.interval, as_json=args.json)


async def _sweep(fanin: FanInMiddleware, args: argparse.Namespace) -> int:
    dry_run = args.mode == "dry_run"
    sweep_policy = SweepPolicy(args.mode) if args.mode in OVERRIDES else None
    report = await sweep(
        fanin, sweep_policy=sweep_policy, dry_run=dry_run, batch=args.batch
    )
    if args.json:
        print_json(report.model_dump(mode="json"))
    else:
        if report.findings:
            print_table(sweep_table(report.findings, dry_run))
        print_text(sweep_summary(report, fanin.config.prefix))
    return ExitCode.STUCK if args.fail_on_stuck and report.stuck else ExitCode.OK


def check_web(args: argparse.Namespace) -> None:
    """Refuse ``web`` before connecting: without the extra, or acting without a token.

    Sets ``args.token`` from ``TASKIQ_FANIN_WEB_TOKEN`` when ``--token`` is not given.
    """
    missing = [m for m in WEB_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        raise UsageError(
            f"the web page needs {' and '.join(missing)}: "
            "pip install 'taskiq-fanin[web]'"
        )
    args.token = args.token or os.environ.get(TOKEN_ENV) or None
    if args.allow_actions and not args.token:
        raise UsageError(f"--allow-actions needs --token (or ${TOKEN_ENV})")


async def _web(fanin: FanInMiddleware, args: argparse.Namespace) -> int:
    from taskiq_fanin.web import serve  # noqa: PLC0415 - only with the extra

    broker = _import_broker(args.broker) if args.broker else None  # imported once
    prefix = fanin.config.prefix
    print(f"taskiq-fanin web: http://{args.host}:{args.port}/ (prefix {prefix!r})")
    await serve(
        fanin,
        host=args.host,
        port=args.port,
        allow_actions=args.allow_actions,
        token=args.token,
        broker=broker,
    )
    return ExitCode.OK


COMMANDS: dict[str, Command] = {
    "status": _status,
    "list": _list,
    "watch": _watch,
    "sweep": _sweep,
    "web": _web,
}
