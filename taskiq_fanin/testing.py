"""Throwaway ``redis-server`` processes for tests, benchmarks and examples.

Each server listens on a free loopback port, keeps nothing on disk, runs in its
own process group (so a Ctrl-C in the terminal reaches us, not it, and we stop it
in order) and lives in a temporary directory removed on stop::

    with RedisServer() as server:
        client = redis.asyncio.Redis.from_url(server.url)

    with RedisCluster() as cluster:  # three masters, no replicas
        client = redis.asyncio.RedisCluster.from_url(cluster.url)

``redis_url_from_env_or_server()`` prefers ``REDIS_URL`` when it is set, so the
same suite can run against a server someone else manages.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import TracebackType

__all__ = [
    "REDIS_URL_ENV",
    "RedisCluster",
    "RedisServer",
    "free_port",
    "redis_url_from_env_or_server",
]

#: Environment variable naming a Redis server to use instead of starting one.
REDIS_URL_ENV = "REDIS_URL"

#: Only ever listen on, and connect to, the loopback interface.
LOOPBACK = "127.0.0.1"

#: How long a fresh server may take to answer PING; generous for a loaded CI box.
DEFAULT_STARTUP_TIMEOUT = 15.0

#: How long a server gets to exit after SIGTERM before it is sent SIGKILL.
DEFAULT_STOP_GRACE = 5.0

#: How long a new cluster may take to agree on its slots.
DEFAULT_CLUSTER_TIMEOUT = 30.0

#: Redis refuses to create a cluster with fewer masters.
_MIN_MASTERS = 3

#: Tries at a fresh port when another process takes ours between probe and bind.
_PORT_ATTEMPTS = 5

_POLL_INTERVAL = 0.02
_INSTALL_HINT = (
    "Install it (Debian/Ubuntu: `apt-get install redis-server`, which also brings "
    "redis-cli; macOS: `brew install redis`), or set REDIS_URL to a Redis server "
    "the tests may use."
)


class _ReplyError(Exception):
    """An error reply (``-ERR ...``, ``-LOADING ...``) from the server."""


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now.

    The port is only free at the moment of the call: callers retry when another
    process takes it before they bind it.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        port: int = sock.getsockname()[1]
        return port


def _find_executable(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        msg = f"{name} was not found on PATH. {_INSTALL_HINT}"
        raise RuntimeError(msg)
    return path


def _command(port: int, *args: str, timeout: float = 1.0) -> bytes:
    """Send one command to ``127.0.0.1:port`` and return its reply.

    Speaks just enough RESP for PING and CLUSTER INFO (simple and bulk strings),
    so waiting for a server needs no client library and no event loop.

    Raises:
        OSError: the server is not reachable (yet) or closed the connection.
        _ReplyError: the server answered with an error.
    """
    request = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg.encode()
        request.append(b"$%d\r\n%s\r\n" % (len(data), data))
    with socket.create_connection((LOOPBACK, port), timeout=timeout) as sock:
        sock.sendall(b"".join(request))
        with sock.makefile("rb") as reader:
            line = reader.readline()
            if not line.endswith(b"\r\n"):
                msg = "connection closed before a full reply"
                raise ConnectionError(msg)
            kind, rest = line[:1], line[1:-2]
            if kind == b"+":
                return rest
            if kind == b"-":
                raise _ReplyError(rest.decode(errors="replace"))
            if kind == b"$":
                size = int(rest)
                return b"" if size < 0 else reader.read(size + 2)[:-2]
            msg = f"unexpected reply {line!r}"
            raise ConnectionError(msg)


def _redis_version(executable: str) -> tuple[int, int]:
    output = subprocess.run(
        [executable, "--version"],
        capture_output=True,
        text=True,
        check=True,
        timeout=10,
    ).stdout
    match = re.search(r"v=(\d+)\.(\d+)", output)
    if match is None:
        msg = f"cannot read the version of {executable}: {output!r}"
        raise RuntimeError(msg)
    return int(match.group(1)), int(match.group(2))


class RedisServer:
    """One ``redis-server`` on a free loopback port, for as long as it is needed.

    Nothing is persisted: no RDB snapshots, no AOF, and the working directory is
    a temporary one removed by :meth:`stop`.

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
        executable = _find_executable(self._executable)
        self._dir = Path(tempfile.mkdtemp(prefix="taskiq-fanin-redis-"))
        try:
            for _ in range(_PORT_ATTEMPTS):
                if self._launch(executable):
                    atexit.register(self.stop)
                    return self
            msg = f"no free port for redis-server after {_PORT_ATTEMPTS} tries"
            raise RuntimeError(msg)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and remove its directory.

        Safe to call more than once, and on a server that never started.
        """
        atexit.unregister(self.stop)
        process, self._process, self._port = self._process, None, None
        if process is not None:
            stop_process_group(process, self._stop_grace)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

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

    def _launch(self, executable: str) -> bool:
        """Run the server on a fresh port; False when that port was taken."""
        port = free_port()
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
            with contextlib.suppress(OSError, _ReplyError):
                if _command(port, "PING") == b"PONG":
                    self._port = port
                    return True
            time.sleep(_POLL_INTERVAL)
        msg = (
            f"redis-server on port {port} did not answer PING within "
            f"{self._startup_timeout:g}s:\n{_tail(log_path)}"
        )
        raise RuntimeError(msg)


class _ClusterNode(RedisServer):
    """A cluster-enabled server whose cluster bus port is picked free as well.

    ``cluster-port`` (Redis 7+) replaces the default bus port ``port + 10000``,
    which is out of range for most ports the kernel hands out.
    """

    def _server_args(self, port: int) -> list[str]:
        return [
            *super()._server_args(port),
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-port", str(free_port()),
            "--cluster-node-timeout", "5000",
        ]  # fmt: skip


class RedisCluster:
    """A Redis Cluster of three masters and no replicas, on free loopback ports.

    Needs ``redis-server`` 7 or newer and ``redis-cli`` (Debian's ``redis-tools``,
    which ``redis-server`` depends on).

    Args:
        masters: how many master nodes (at least 3, which Redis requires).
        executable: the server binary, looked up on PATH.
        cli: the ``redis-cli`` binary, looked up on PATH.
        startup_timeout: seconds to wait for each node's first PONG.
        cluster_timeout: seconds to wait for every node to report
            ``cluster_state:ok``.
        stop_grace: seconds between SIGTERM and SIGKILL on stop.
    """

    def __init__(
        self,
        *,
        masters: int = 3,
        executable: str = "redis-server",
        cli: str = "redis-cli",
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        cluster_timeout: float = DEFAULT_CLUSTER_TIMEOUT,
        stop_grace: float = DEFAULT_STOP_GRACE,
    ) -> None:
        if masters < _MIN_MASTERS:
            msg = f"a Redis Cluster needs at least 3 masters, not {masters}"
            raise ValueError(msg)
        self._masters = masters
        self._executable = executable
        self._cli = cli
        self._startup_timeout = startup_timeout
        self._cluster_timeout = cluster_timeout
        self._stop_grace = stop_grace
        self._nodes: list[_ClusterNode] = []

    @property
    def nodes(self) -> tuple[RedisServer, ...]:
        """The running nodes, in port-assignment order."""
        if not self._nodes:
            msg = "the cluster is not running: call start() first"
            raise RuntimeError(msg)
        return tuple(self._nodes)

    @property
    def startup_nodes(self) -> list[tuple[str, int]]:
        """``(host, port)`` of every node, for a cluster client's startup nodes."""
        return [(node.host, node.port) for node in self.nodes]

    @property
    def urls(self) -> list[str]:
        """A ``redis://`` URL for every node."""
        return [node.url for node in self.nodes]

    @property
    def url(self) -> str:
        """The first node's URL: enough for a cluster client to find the rest."""
        return self.nodes[0].url

    def start(self) -> RedisCluster:
        """Start the nodes, join them into one cluster and wait until it is ok.

        Returns:
            The cluster itself, to allow ``cluster = RedisCluster().start()``.

        Raises:
            RuntimeError: a binary is missing or too old, or the cluster did not
                form in time.
        """
        if self._nodes:
            msg = "the cluster is already started"
            raise RuntimeError(msg)
        executable = _find_executable(self._executable)
        cli = _find_executable(self._cli)
        if _redis_version(executable) < (7, 0):
            msg = f"RedisCluster needs redis-server 7.0 or newer ({executable})"
            raise RuntimeError(msg)
        try:
            for _ in range(self._masters):
                node = _ClusterNode(
                    executable=executable,
                    startup_timeout=self._startup_timeout,
                    stop_grace=self._stop_grace,
                )
                self._nodes.append(node)
                node.start()
            self._create(cli)
            self._wait_until_ok()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every node and remove their directories. Safe to call twice."""
        nodes, self._nodes = self._nodes, []
        for node in nodes:
            node.stop()

    def __enter__(self) -> RedisCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        ports = [node.port for node in self._nodes if node.running]
        return f"<{type(self).__name__} ports={ports}>"

    def _create(self, cli: str) -> None:
        addresses = [f"{host}:{port}" for host, port in self.startup_nodes]
        command = [
            cli, "--cluster", "create", *addresses,
            "--cluster-replicas", "0", "--cluster-yes",
        ]  # fmt: skip
        try:
            result = subprocess.run(
                command,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=self._cluster_timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            msg = f"`{' '.join(command)}` did not finish in {self._cluster_timeout:g}s"
            raise RuntimeError(msg) from exc
        if result.returncode != 0:
            msg = (
                f"`{' '.join(command)}` failed with exit code {result.returncode}:\n"
                f"{result.stdout}{result.stderr}"
            )
            raise RuntimeError(msg)

    def _wait_until_ok(self) -> None:
        """Wait until every node sees every other and all slots are served."""
        expected = f"cluster_known_nodes:{len(self._nodes)}"
        deadline = time.monotonic() + self._cluster_timeout
        pending = [node.port for node in self._nodes]
        while pending:
            pending = [port for port in pending if not _cluster_ok(port, expected)]
            if not pending:
                return
            if time.monotonic() >= deadline:
                msg = (
                    f"the cluster nodes on ports {pending} did not report "
                    f"cluster_state:ok within {self._cluster_timeout:g}s"
                )
                raise RuntimeError(msg)
            time.sleep(_POLL_INTERVAL * 5)


def _cluster_ok(port: int, known_nodes_line: str) -> bool:
    try:
        info = _command(port, "CLUSTER", "INFO").decode()
    except (OSError, _ReplyError):
        return False
    lines = set(info.splitlines())
    return "cluster_state:ok" in lines and known_nodes_line in lines


def stop_process_group(process: subprocess.Popen[bytes], grace: float = 2.0) -> None:
    """SIGTERM the process's group, then SIGKILL it if it outlives ``grace``.

    For processes started with ``start_new_session=True`` (the leaders of their
    own group): a redis-server, or a ``taskiq worker``, which can hang on SIGTERM
    and leaves child processes behind if only its leader is signalled.
    """
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


@contextlib.contextmanager
def redis_url_from_env_or_server() -> Iterator[str]:
    """Yield ``$REDIS_URL`` when it is set, else the URL of a fresh server.

    A server started here is stopped when the block exits; a server named by
    ``REDIS_URL`` is left alone (and never flushed: callers isolate their keys
    with a unique prefix).

    Raises:
        RuntimeError: ``REDIS_URL`` is unset and no server could be started,
            with instructions for installing ``redis-server``.
    """
    url = os.environ.get(REDIS_URL_ENV, "").strip()
    if url:
        yield url
        return
    with RedisServer() as server:
        yield server.url
