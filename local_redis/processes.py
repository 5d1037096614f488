"""Child processes in a process group of their own, stopped for certain.

A redis-server or a ``taskiq worker`` is started as the leader of a new session
(``start_new_session=True``): a Ctrl-C in the terminal reaches us, not it, and
the whole group is signalled at once on stop. ``taskiq worker`` can hang on
SIGTERM and forks a child per ``--workers``, so SIGKILL follows a grace period
and the stop waits until no process of the group is left.

What a test or a benchmark reads about the processes (their children, whether
one lives, the CPU a group used) comes from ``/proc``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

#: How often a stop looks whether the group is gone.
_POLL = 0.02

#: CPU clock ticks per second, the unit of /proc/<pid>/stat's times.
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class ProcessInfo:
    """One process as /proc shows it: its parent, its group, its state, its CPU."""

    pid: int
    state: str
    ppid: int
    pgid: int
    #: User plus system CPU time, in clock ticks.
    ticks: int

    @property
    def alive(self) -> bool:
        """Not a zombie (a zombie holds nothing but its pid)."""
        return self.state != "Z"


def process_info(pid: int) -> ProcessInfo | None:
    """What /proc says of ``pid``, or ``None`` when it is gone (or no /proc)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # pid (comm) state ppid pgrp ... utime(14) stime(15): comm may hold spaces
    # and parentheses, so split after the last ')'.
    fields = text[text.rindex(")") + 2 :].split()
    return ProcessInfo(
        pid=pid,
        state=fields[0],
        ppid=int(fields[1]),
        pgid=int(fields[2]),
        ticks=int(fields[11]) + int(fields[12]),
    )


def _all_processes() -> Iterator[ProcessInfo]:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            info = process_info(int(entry.name))
            if info is not None:  # gone meanwhile
                yield info


def alive(pid: int) -> bool:
    """Whether a process with this pid exists (and is not a zombie)."""
    info = process_info(pid)
    return info is not None and info.alive


def children_of(pid: int) -> list[int]:
    """Live processes whose parent is ``pid`` (a ``taskiq worker``'s children)."""
    return [p.pid for p in _all_processes() if p.ppid == pid and p.alive]


def group_processes(pgid: int) -> list[ProcessInfo] | None:
    """Every process of group ``pgid``, zombies too (``None``: no /proc here)."""
    if not Path("/proc").is_dir():
        return None
    return [p for p in _all_processes() if p.pgid == pgid]


def group_cpu_seconds(pgid: int | None) -> float | None:
    """User + system CPU seconds of the processes of group ``pgid`` (Linux only)."""
    members = None if pgid is None else group_processes(pgid)
    if members is None:
        return None
    return sum(p.ticks for p in members) / _CLOCK_TICKS


def group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs (zombies do not count).

    A killed child is reparented and reaped by PID 1 in its own time; until then
    ``killpg(pgid, 0)`` still finds it, though it holds nothing but its pid.
    """
    members = group_processes(pgid)
    if members is not None:
        return any(p.alive for p in members)
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def stop_process_group(process: subprocess.Popen[bytes], grace: float = 2.0) -> None:
    """SIGTERM the process's group, then SIGKILL what outlives ``grace``.

    For processes started with ``start_new_session=True`` (the leaders of their
    own group). Returns once the leader is reaped and no process of its group
    runs, so nothing it started is left behind.
    """
    pgid = process.pid
    if process.poll() is not None and not group_alive(pgid):
        return
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if process.poll() is not None and not group_alive(pgid):
            return
        time.sleep(_POLL)
    _signal_group(pgid, signal.SIGKILL)
    process.wait()
    # SIGKILL is not ignorable; wait (bounded) for the group's last member to go.
    while group_alive(pgid) and time.monotonic() < deadline + grace:
        time.sleep(_POLL)


def start_in_own_group(
    command: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    output: IO[bytes] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``command`` as the leader of a new session (its own process group).

    With ``output``, both of its streams go there; else it inherits ours.
    """
    return subprocess.Popen(
        list(command),
        cwd=cwd,
        env=None if env is None else dict(env),
        stdin=subprocess.DEVNULL,
        stdout=output,
        stderr=subprocess.STDOUT if output is not None else None,
        start_new_session=True,
    )


def taskiq_worker_command(
    app: str,
    *,
    max_async_tasks: int,
    workers: int = 1,
    options: Sequence[str] = (),
) -> list[str]:
    """``python -m taskiq worker <app>`` with this interpreter, and its options."""
    return [
        sys.executable, "-m", "taskiq", "worker", app,
        "--workers", str(workers),
        "--max-async-tasks", str(max_async_tasks),
        *options,
    ]  # fmt: skip


def with_pythonpath(root: Path, env: Mapping[str, str]) -> dict[str, str]:
    """``env`` with ``root`` first on PYTHONPATH, so a child imports from there."""
    paths = [str(root), env.get("PYTHONPATH", "")]
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


@contextlib.contextmanager
def process_group(
    command: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    log: Path | None = None,
    grace: float = 2.0,
) -> Iterator[subprocess.Popen[bytes]]:
    """``command`` in its own process group for the block, then stopped for certain.

    With ``log``, its output (both streams) is appended to that file.
    """
    with contextlib.ExitStack() as stack:
        output = stack.enter_context(log.open("ab")) if log is not None else None
        process = start_in_own_group(command, cwd=cwd, env=env, output=output)
        try:
            yield process
        finally:
            stop_process_group(process, grace)
