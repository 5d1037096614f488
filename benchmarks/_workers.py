"""Real ``taskiq worker`` processes, started in their own process group and
stopped for certain.

``taskiq worker`` can hang on SIGTERM while tasks wait, and it forks a child per
``--workers``: each worker is the leader of a new session, so the whole group is
signalled at once (SIGTERM, then SIGKILL after a grace period), and nothing is
left behind on an exception, a Ctrl-C or a SIGTERM to the benchmark.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

from redis.asyncio import Redis
from taskiq import AsyncBroker
from taskiq.kicker import AsyncKicker

from benchmarks._redis import stream_drained, wait_until
from benchmarks.apps.common import PING_TASK, AppSettings

#: The repository root: workers import ``benchmarks.apps.*`` from here.
ROOT = Path(__file__).resolve().parents[1]

#: Seconds a worker may take to start listening (imports, fork, broker startup).
READY_TIMEOUT = 60.0
#: Seconds between SIGTERM and SIGKILL. taskiq 0.13 often keeps polling its
#: stream after SIGTERM instead of exiting, so this is usually spent in full.
STOP_GRACE = 1.0
#: Seconds a stopping worker waits for running tasks (it never needs them).
WAIT_TASKS_TIMEOUT = 1.0

#: Stream entries a run starts with: the ping that proved the worker ready.
PING_ENTRIES = 1

_POLL = 0.02

#: Every worker not yet stopped, for the last-resort cleanup at exit.
_LIVE: set[WorkerProcess] = set()


class WorkerError(RuntimeError):
    """A worker exited early or never became ready."""


class WorkerProcess:
    """One ``taskiq worker <app>:worker_broker --workers 1`` for one run.

    Args:
        app: the task module, e.g. ``benchmarks.apps.overhead``.
        settings: the run's settings, passed through the environment.
        max_async_tasks: the worker's slots.
        log_path: where the worker's output goes (kept for post-mortems).
    """

    def __init__(
        self,
        app: str,
        settings: AppSettings,
        *,
        max_async_tasks: int,
        log_path: Path,
    ) -> None:
        self.app = app
        self.settings = settings
        self.max_async_tasks = max_async_tasks
        self.log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pgid(self) -> int | None:
        """The worker's process group (its leader's pid) while it runs."""
        return None if self._process is None else self._process.pid

    @property
    def command(self) -> list[str]:
        """The command line, as a person would type it."""
        return [
            sys.executable, "-m", "taskiq", "worker", f"{self.app}:worker_broker",
            "--workers", "1",
            "--max-async-tasks", str(self.max_async_tasks),
            # A log line per task would be worker CPU spent on both sides alike.
            "--log-level", "WARNING",
            "--shutdown-timeout", "1",
            "--wait-tasks-timeout", str(WAIT_TASKS_TIMEOUT),
        ]  # fmt: skip

    def start(self) -> WorkerProcess:
        """Start the worker (not yet ready: see :meth:`wait_ready`)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **self.settings.to_env()}
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p
        )
        with self.log_path.open("wb") as log:
            self._process = subprocess.Popen(
                self.command,
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        _LIVE.add(self)
        return self

    def check_alive(self) -> None:
        """Raise with the log's tail if the worker has exited."""
        if self._process is None or self._process.poll() is not None:
            code = None if self._process is None else self._process.returncode
            msg = f"worker {self.app} exited (code {code}):\n{self.log_tail()}"
            raise WorkerError(msg)

    async def wait_ready(
        self, broker: AsyncBroker, client: Redis, timeout: float = READY_TIMEOUT
    ) -> None:
        """Kick a ping on the run's queue and wait until it was acknowledged.

        A blocked XREADGROUP does not show in XINFO CONSUMERS (Redis 7.0), so a
        round trip is the proof that the worker is listening. The stream then
        holds that one entry: see :data:`PING_ENTRIES`.
        """
        kicker: AsyncKicker[[], None] = AsyncKicker(
            task_name=PING_TASK, broker=broker, labels={}
        )
        await kicker.kiq()
        queue = self.settings.queue
        ready = await wait_until(
            lambda: stream_drained(client, queue, PING_ENTRIES),
            timeout=timeout,
            check=self.check_alive,
        )
        if not ready:
            tail = self.log_tail()
            self.stop()
            msg = f"worker {self.app} not ready in {timeout:g}s:\n{tail}"
            raise WorkerError(msg)

    def stop(self, grace: float = STOP_GRACE) -> None:
        """SIGTERM the worker's group, SIGKILL what outlives ``grace``; idempotent."""
        process, self._process = self._process, None
        _LIVE.discard(self)
        if process is None:
            return
        _signal_group(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            process.poll()
            if process.returncode is not None and not _group_alive(process.pid):
                return
            time.sleep(_POLL)
        _signal_group(process.pid, signal.SIGKILL)
        process.wait()
        # SIGKILL is not ignorable; wait for the group's last member to go.
        while _group_alive(process.pid) and time.monotonic() < deadline + grace:
            time.sleep(_POLL)

    def log_tail(self, lines: int = 30) -> str:
        """The end of the worker's output."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


def _signal_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def _group_alive(pgid: int) -> bool:
    """Whether a process of the group is still running (zombies do not count).

    A killed child is reparented and reaped by PID 1 in its own time; until then
    ``killpg(pgid, 0)`` still finds it, though it holds nothing but its pid.
    """
    members = group_processes(pgid)
    if members is not None:
        return any(state != "Z" for _, state, _ in members)
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def group_processes(pgid: int) -> list[tuple[int, str, int]] | None:
    """(pid, state, CPU clock ticks) of each process in group ``pgid``.

    Read from /proc; ``None`` where there is no /proc.
    """
    proc = Path("/proc")
    if not proc.is_dir():
        return None
    members = []
    for stat in proc.glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        # After the parenthesised name: state ppid pgrp ... utime(12) stime(13)
        fields = text[text.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid:
            pid = int(stat.parent.name)
            members.append((pid, fields[0], int(fields[11]) + int(fields[12])))
    return members


def stop_all() -> None:
    """Stop every worker still running (at exit, or after an interrupt)."""
    for worker in list(_LIVE):
        worker.stop(grace=1.0)


def interrupted() -> int:
    """After Ctrl-C: make sure every worker is gone, say so; the exit status."""
    stop_all()
    print(
        "interrupted: every worker and Redis started here is stopped", file=sys.stderr
    )
    return 130


def _sigterm_as_interrupt(signum: int, _frame: FrameType | None) -> None:
    # asyncio.run turns SIGINT into a cancellation of the main task, which runs
    # every finally block; a SIGTERM gets the same treatment.
    os.kill(os.getpid(), signal.SIGINT)


def install_cleanup() -> None:
    """Stop workers at exit, and treat SIGTERM and SIGHUP like Ctrl-C."""
    atexit.register(stop_all)
    # A shell starts background jobs with SIGINT ignored; asyncio then handles
    # no SIGINT at all, and the SIGTERM below (sent on as SIGINT) would be lost.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _sigterm_as_interrupt)
