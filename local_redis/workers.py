"""A real ``taskiq worker`` process, in its own process group, stopped for certain.

``taskiq worker`` can hang on SIGTERM while tasks wait, and it forks a child per
``--workers``: each worker is the leader of a new session, so the whole group is
signalled at once (SIGTERM, then SIGKILL after a grace), and
:func:`stop_workers_at_exit` leaves nothing behind on an exception, a Ctrl-C or
a SIGTERM to the program that started them.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType, TracebackType

from local_redis.processes import (
    group_cpu_seconds,
    start_in_own_group,
    stop_process_group,
    taskiq_worker_command,
)

#: Every worker started and not yet stopped, for the last-resort stop at exit.
_LIVE: set[TaskiqWorker] = set()


class WorkerError(RuntimeError):
    """A worker exited while it was still needed, or never became ready."""


class TaskiqWorker:
    """``python -m taskiq worker <app>`` for as long as it is needed.

    Args:
        app: ``module:broker`` (or a broker factory).
        max_async_tasks: the worker's slots.
        options: more command-line options (``--log-level WARNING``...).
        cwd: where it runs (and imports from, with ``env``'s PYTHONPATH).
        env: its whole environment (default: ours).
        log_path: where both its streams go (default: ours);
        append: add to the log rather than start it afresh.
        grace: seconds between SIGTERM and SIGKILL on stop.
    """

    def __init__(
        self,
        app: str,
        *,
        max_async_tasks: int,
        options: Sequence[str] = (),
        cwd: Path | None = None,
        env: Mapping[str, str] | None = None,
        log_path: Path | None = None,
        append: bool = False,
        grace: float = 2.0,
    ) -> None:
        self.app = app
        self.command = taskiq_worker_command(
            app, max_async_tasks=max_async_tasks, options=options
        )
        self.cwd = cwd
        self.env = env
        self.log_path = log_path
        self.append = append
        self.grace = grace
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def pgid(self) -> int | None:
        """The worker's process group (its leader's pid) while it runs."""
        return None if self.process is None else self.process.pid

    def cpu_seconds(self) -> float | None:
        """CPU seconds its processes have used so far (Linux only)."""
        return group_cpu_seconds(self.pgid)

    def start(self) -> TaskiqWorker:
        """Start the worker (listening a moment later: the caller proves it)."""
        if self.log_path is None:
            self.process = start_in_own_group(self.command, cwd=self.cwd, env=self.env)
        else:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            with self.log_path.open("ab" if self.append else "wb") as log:
                # The child keeps its own copy of the log descriptor.
                self.process = start_in_own_group(
                    self.command, cwd=self.cwd, env=self.env, output=log
                )
        _LIVE.add(self)
        return self

    def check_alive(self) -> None:
        """Raise with the log's tail if the worker has exited.

        Raises:
            WorkerError: it is not running.
        """
        if self.process is None or self.process.poll() is not None:
            code = None if self.process is None else self.process.returncode
            msg = f"worker {self.app} exited (code {code}):\n{self.log_tail()}"
            raise WorkerError(msg)

    def stop(self, grace: float | None = None) -> None:
        """SIGTERM the worker's group, SIGKILL what outlives the grace; idempotent."""
        process, self.process = self.process, None
        _LIVE.discard(self)
        if process is not None:
            stop_process_group(process, self.grace if grace is None else grace)

    def log_tail(self, lines: int = 30) -> str:
        """The end of the worker's output."""
        try:
            text = self.log_path.read_text(errors="replace") if self.log_path else ""
        except OSError:
            text = ""
        return "\n".join(text.splitlines()[-lines:]) or "(no log)"

    def __enter__(self) -> TaskiqWorker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()


def stop_all_workers(grace: float = 1.0) -> None:
    """Stop every worker still running (at exit, or after an interrupt)."""
    for worker in list(_LIVE):
        worker.stop(grace)


def _sigterm_as_interrupt(signum: int, _frame: FrameType | None) -> None:
    # asyncio.run turns SIGINT into a cancellation of the main task, which runs
    # every finally block; a SIGTERM gets the same treatment.
    os.kill(os.getpid(), signal.SIGINT)


def stop_workers_at_exit() -> None:
    """For a program's main: stop workers at exit; SIGTERM, SIGHUP act as Ctrl-C."""
    atexit.register(stop_all_workers)
    # A shell starts background jobs with SIGINT ignored; asyncio then handles
    # no SIGINT at all, and the SIGTERM below (sent on as SIGINT) would be lost.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _sigterm_as_interrupt)
