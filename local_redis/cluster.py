"""A throwaway Redis Cluster of three masters (and replicas) on free loopback ports."""

from __future__ import annotations

import re
import subprocess
import time
from types import TracebackType

import redis
from redis.exceptions import RedisError

from local_redis.host import LOOPBACK, POLL_INTERVAL, find_executable, free_port
from local_redis.server import DEFAULT_STARTUP_TIMEOUT, DEFAULT_STOP_GRACE, RedisServer

#: How long a new cluster may take to agree on its slots.
DEFAULT_CLUSTER_TIMEOUT = 30.0

#: Redis refuses to create a cluster with fewer masters.
_MIN_MASTERS = 3


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


class _ClusterNode(RedisServer):
    """A cluster-enabled server whose cluster bus port is picked free as well.

    ``cluster-port`` (Redis 7+) replaces the default bus port ``port + 10000``,
    which is out of range for most ports the kernel hands out. A restarted node
    keeps its bus port (and its directory, so its ``nodes.conf``): the other
    nodes know it by both ports, and take it back, as a replica of whichever
    node was promoted in its place.
    """

    #: Milliseconds before a silent node counts as failing (a replica takes over).
    node_timeout_ms = 5000
    #: The bus port, picked at the first start and kept across restarts.
    bus_port: int | None = None

    def _server_args(self, port: int) -> list[str]:
        if self.bus_port is None:
            self.bus_port = free_port()
        return [
            *super()._server_args(port),
            "--cluster-enabled", "yes",
            "--cluster-config-file", "nodes.conf",
            "--cluster-port", str(self.bus_port),
            "--cluster-node-timeout", str(self.node_timeout_ms),
        ]  # fmt: skip

    def _launch(self, executable: str, port: int) -> bool:
        launched = super()._launch(executable, port)
        if not launched and self._port is None:
            self.bus_port = None  # a first start: another try may take another
        return launched


class RedisCluster:
    """A Redis Cluster of three masters and no replicas, on free loopback ports.

    Needs ``redis-server`` 7 or newer and ``redis-cli`` (Debian's ``redis-tools``,
    which ``redis-server`` depends on).

    Args:
        masters: how many master nodes (at least 3, which Redis requires).
        replicas: replicas of each master (a failover promotes one).
        node_timeout_ms: ``cluster-node-timeout``: how long a master may be
            silent before its replica takes over.
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
        replicas: int = 0,
        node_timeout_ms: int = 5000,
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
        self._replicas = replicas
        self._node_timeout_ms = node_timeout_ms
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
        executable = find_executable(self._executable)
        cli = find_executable(self._cli)
        if _redis_version(executable) < (7, 0):
            msg = f"RedisCluster needs redis-server 7.0 or newer ({executable})"
            raise RuntimeError(msg)
        try:
            for _ in range(self._masters * (1 + self._replicas)):
                node = _ClusterNode(
                    executable=executable,
                    startup_timeout=self._startup_timeout,
                    stop_grace=self._stop_grace,
                )
                node.node_timeout_ms = self._node_timeout_ms
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
            "--cluster-replicas", str(self._replicas), "--cluster-yes",
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
        expected = len(self._nodes)
        deadline = time.monotonic() + self._cluster_timeout
        pending = [node.port for node in self._nodes]
        while pending:
            pending = [
                port
                for port in pending
                if not (_cluster_ok(port, expected) and _linked(port))
            ]
            if not pending:
                return
            if time.monotonic() >= deadline:
                msg = (
                    f"the cluster nodes on ports {pending} did not report "
                    f"cluster_state:ok within {self._cluster_timeout:g}s"
                )
                raise RuntimeError(msg)
            time.sleep(POLL_INTERVAL * 5)


def _cluster_ok(port: int, known_nodes: int) -> bool:
    """Whether the node on ``port`` serves every slot and knows every node."""
    client = redis.Redis(
        host=LOOPBACK, port=port, socket_timeout=1.0, socket_connect_timeout=1.0
    )
    try:
        info: object = client.cluster("INFO")
    except RedisError:
        return False
    finally:
        client.close()
    fields = _fields(info)
    return (
        fields.get("cluster_state") == "ok"
        and int(fields.get("cluster_known_nodes", 0)) == known_nodes
    )


def _linked(port: int) -> bool:
    """Whether the node on ``port`` is a master, or a replica linked to its master."""
    client = redis.Redis(
        host=LOOPBACK, port=port, socket_timeout=1.0, socket_connect_timeout=1.0
    )
    try:
        info = client.info("replication")
    except RedisError:
        return False
    finally:
        client.close()
    return info.get("role") == "master" or info.get("master_link_status") == "up"


def _fields(info: object) -> dict[str, str]:
    """CLUSTER INFO as ``{field: value}``, however redis-py parsed it."""
    if isinstance(info, dict):
        return {str(key): str(value) for key, value in info.items()}
    text = info.decode() if isinstance(info, bytes) else str(info)
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
