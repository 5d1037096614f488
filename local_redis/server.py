"""One throwaway ``redis-server`` on a free loopback port, and helpers around it.

Each server keeps nothing on disk, runs in its own process group (so a Ctrl-C in
the terminal reaches us, not it, and we stop it in order) and lives in a
temporary directory removed on stop. Readiness is asked with redis-py's PING.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from local_redis.host import (
    LOOPBACK,
    POLL_INTERVAL,
    answers,
    find_executable,
    free_port,
)
from local_redis.kept_logs import keep_copy
from local_redis.processes import stop_process_group

#: Environment variable naming a Redis server to use instead of starting one
#: (:func:`local_redis.redis_url_from_env_or_server`).
REDIS_URL_ENV = "REDIS_URL"

#: How long a fresh server may take to answer PING; generous for a loaded CI box.
DEFAULT_STARTUP_TIMEOUT = 15.0

#: How long a server gets to exit after SIGTERM before it is sent SIGKILL.
DEFAULT_STOP_GRACE = 5.0

#: Tries at a fresh port when another process takes ours between probe and bind.
_PORT_ATTEMPTS = 5


class RedisServer:
    """One ``redis-server`` on a free loopback port, for as long as it is needed.

    Nothing is persisted unless ``extra_args`` asks for it (``--appendonly yes``):
    the working directory is a temporary one removed by :meth:`stop`. For fault
    tests, :meth:`restart` brings the server back on the same port and directory
    (it loads what it persisted there), and :meth:`suspend` / :meth:`resume` freeze
    and thaw it (SIGSTOP, SIGCONT) as a stalled host would.

    Args:
        executable: the server binary, looked up on PATH.
        extra_args: more ``--option value`` arguments for the server.
        startup_timeout: seconds to wait for the first PONG.
        stop_grace: seconds between SIGTERM and SIGKILL on stop.
    """

    def __init__(
        self,
        *,
        executable: str = "redis-server",
        extra_args: Sequence[str] = (),
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        stop_grace: float = DEFAULT_STOP_GRACE,
    ) -> None:
        self._executable = executable
        self._extra_args = tuple(extra_args)
        self._startup_timeout = startup_timeout
        self._stop_grace = stop_grace
        self._process: subprocess.Popen[bytes] | None = None
        self._port: int | None = None
        self._dir: Path | None = None

    @property
    def port(self) -> int:
        """The TCP port the running server listens on."""
        if self._port is None:
            msg = "the server is not running: call start() first"
            raise RuntimeError(msg)
        return self._port

    @property
    def host(self) -> str:
        """The address the server listens on (always loopback)."""
        return LOOPBACK

    @property
    def url(self) -> str:
        """A ``redis://`` URL for database 0 of the running server."""
        return f"redis://{LOOPBACK}:{self.port}/0"

    @property
    def directory(self) -> Path:
        """The server's temporary working directory (log, cluster config)."""
        if self._dir is None:
            msg = "the server is not running: call start() first"
            raise RuntimeError(msg)
        return self._dir

    @property
    def running(self) -> bool:
        """Whether the server process is alive."""
        return self._process is not None and self._process.poll() is None

    def start(self) -> RedisServer:
        """Start the server and wait until it answers PING.

        Returns:
            The server itself, to allow ``server = RedisServer().start()``.

        Raises:
            RuntimeError: the binary is missing, or the server did not come up
                (the message carries the tail of its log).
        """
        if self._process is not None:
            msg = "the server is already started"
            raise RuntimeError(msg)
        executable = find_executable(self._executable)
        self._dir = Path(tempfile.mkdtemp(prefix="taskiq-fanin-redis-"))
        try:
            for _ in range(_PORT_ATTEMPTS):
                if self._launch(executable, free_port()):
                    atexit.register(self.stop)
                    return self
            msg = f"no free port for redis-server after {_PORT_ATTEMPTS} tries"
            raise RuntimeError(msg)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and remove its directory.

        The directory is copied first under ``$LOCAL_REDIS_KEEP_LOGS`` when set.

        Safe to call more than once, and on a server that never started.
        """
        atexit.unregister(self.stop)
        process, self._process, self._port = self._process, None, None
        if process is not None:
            _thaw(process)  # a suspended server would not act on SIGTERM
            stop_process_group(process, self._stop_grace)
        if self._dir is not None:
            keep_copy(self._dir)
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def restart(self, *, down_for: float = 0.0, crash: bool = False) -> None:
        """Stop the server, and start it again on the same port and directory.

        Clients see the port refuse connections for about ``down_for`` seconds;
        the new server loads what the old one persisted there (its AOF, with
        ``--appendonly yes``), as after an operator's restart or, with ``crash``
        (SIGKILL: no shutdown save), a crash. Waits until it answers PING.

        Raises:
            RuntimeError: the server is not running, or did not come back (the
                port was taken meanwhile, or it failed to load its data).
        """
        process, port = self._process, self.port
        if process is None:
            msg = "the server is not running: call start() first"
            raise RuntimeError(msg)
        _thaw(process)
        if crash:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        else:
            stop_process_group(process, self._stop_grace)
        self._process = None
        time.sleep(down_for)
        if not self._launch(find_executable(self._executable), port):
            self._port = None
            msg = f"redis-server could not listen on port {port} again: it was taken"
            raise RuntimeError(msg)

    def suspend(self) -> None:
        """Freeze the server (SIGSTOP): connections stay open, nothing answers.

        The kernel still accepts connections and buffers what clients send;
        :meth:`resume` lets the server read and run it, replies to clients that
        gave up meanwhile included.
        """
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        """Let a suspended server run again (SIGCONT)."""
        self._signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL the server and leave it dead (a crashed host); ``stop`` cleans up."""
        self._signal(signal.SIGKILL)
        if self._process is not None:
            self._process.wait()

    def _signal(self, signum: int) -> None:
        if self._process is None or self._process.poll() is not None:
            msg = "the server is not running: call start() first"
            raise RuntimeError(msg)
        os.kill(self._process.pid, signum)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = f"port={self._port}" if self._port is not None else "stopped"
        return f"<{type(self).__name__} {where}>"

    def _client_options(self) -> dict[str, Any]:
        """What a client needs besides the port to be answered (PING at start).

        Subclasses add TLS, a user: a locked-down server (``secure.py``).
        """
        return {}

    def _server_args(self, port: int) -> list[str]:
        """Command-line options for a server on ``port``; subclasses add more."""
        return [
            "--port", str(port),
            "--bind", LOOPBACK,
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.directory),
            "--daemonize", "no",
            *self._extra_args,
        ]  # fmt: skip

    def _launch(self, executable: str, port: int) -> bool:
        """Run the server on ``port``; False when that port was taken."""
        log_path = self.directory / "redis.log"
        with log_path.open("ab") as log:
            # The child keeps its own copy of the log descriptor.
            self._process = subprocess.Popen(
                [executable, *self._server_args(port)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + self._startup_timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                self._process = None
                log_text = _tail(log_path)
                if "Address already in use" in log_text:
                    return False
                msg = f"redis-server exited at startup:\n{log_text}"
                raise RuntimeError(msg)
            if answers(port, **self._client_options()):
                self._port = port
                return True
            time.sleep(POLL_INTERVAL)
        msg = (
            f"redis-server on port {port} did not answer PING within "
            f"{self._startup_timeout:g}s:\n{_tail(log_path)}"
        )
        raise RuntimeError(msg)


def _thaw(process: subprocess.Popen[bytes]) -> None:
    """SIGCONT, in case the process was suspended: it then acts on other signals."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(process.pid, signal.SIGCONT)


def _tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])
