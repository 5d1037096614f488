"""The benchmark's ``taskiq worker`` processes: started, proved ready, stopped.

The process itself (its own process group, SIGTERM then SIGKILL after a grace,
nothing left behind) is the toolkit's (``local_redis.processes``); here is what
a benchmark adds: settings through the environment, a ping that proves the
worker listens, and a last-resort stop of every worker on exit or Ctrl-C.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import FrameType

from redis.asyncio import Redis
from taskiq import AsyncBroker
from taskiq.kicker import AsyncKicker

from benchmarks.apps.common import PING_TASK, AppSettings
from local_redis import (
    start_in_own_group,
    stop_process_group,
    stream_drained,
    taskiq_worker_command,
    wait_until,
    with_pythonpath,
)

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
        return taskiq_worker_command(
            f"{self.app}:worker_broker",
            max_async_tasks=self.max_async_tasks,
            options=(
                # A log line per task would be worker CPU spent on both sides.
                "--log-level", "WARNING",
                "--shutdown-timeout", "1",
                "--wait-tasks-timeout", str(WAIT_TASKS_TIMEOUT),
            ),
        )  # fmt: skip

    def start(self) -> WorkerProcess:
        """Start the worker (not yet ready: see :meth:`wait_ready`)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = with_pythonpath(ROOT, {**os.environ, **self.settings.to_env()})
        with self.log_path.open("wb") as log:
            self._process = start_in_own_group(
                self.command, cwd=ROOT, env=env, output=log
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
        if process is not None:
            stop_process_group(process, grace)

    def log_tail(self, lines: int = 30) -> str:
        """The end of the worker's output."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


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
