"""A throwaway Sentinel setup: a primary, replicas and three sentinels on loopback.

Every process is a ``redis-server`` on a free loopback port (the sentinels run
with ``--sentinel`` and a config file of their own, which they rewrite), in its
own process group, stopped at the end. The sentinels notice a dead primary
within ``down_after_ms`` and promote a replica; :meth:`RedisSentinel.kill_primary`
SIGKILLs the primary and returns once a replica is promoted and writable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import TracebackType

from local_redis.host import LOOPBACK, POLL_INTERVAL
from local_redis.sentinel_node import SentinelNode, info, master_view, named_primary
from local_redis.server import DEFAULT_STARTUP_TIMEOUT, DEFAULT_STOP_GRACE, RedisServer
from local_redis.waiting import poll_until

#: The name the sentinels know the primary by.
DEFAULT_MASTER_NAME = "fanin-primary"
#: A primary that does not answer for this long is down (Sentinel's own: 30 s).
#: Well over a second: a sentinel reconnects at most once a second, and its
#: down clock for a promoted primary starts at the switch, so its first PING
#: may leave nearly a second late; with 1 s, a promoted primary slow to answer
#: on a busy box was failed over again at once (tests/test_local_sentinel.py).
DEFAULT_DOWN_AFTER_MS = 3000
#: How long one failover may take before another is tried (Sentinel's: 3 min).
DEFAULT_FAILOVER_TIMEOUT_MS = 3000
#: How long a setup may take to agree (replicas in sync, sentinels known).
DEFAULT_AGREE_TIMEOUT = 30.0


class RedisSentinel:
    """A primary, ``replicas`` replicas and three sentinels, on free loopback ports.

    Args:
        replicas: how many replicas of the primary (at least one, to fail over to).
        sentinels: how many sentinels watch it (two must agree it is down).
        master_name: the name the sentinels know the primary by.
        down_after_ms: ``down-after-milliseconds``: silence before a primary is down.
        failover_timeout_ms: ``failover-timeout``.
        extra_args: more ``--option value`` arguments for the primary and replicas.
        agree_timeout: seconds to wait for the replicas to sync and the sentinels
            to know each other, and for a failover to finish.
    """

    def __init__(
        self,
        *,
        replicas: int = 1,
        sentinels: int = 3,
        master_name: str = DEFAULT_MASTER_NAME,
        down_after_ms: int = DEFAULT_DOWN_AFTER_MS,
        failover_timeout_ms: int = DEFAULT_FAILOVER_TIMEOUT_MS,
        extra_args: Sequence[str] = (),
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        agree_timeout: float = DEFAULT_AGREE_TIMEOUT,
        stop_grace: float = DEFAULT_STOP_GRACE,
    ) -> None:
        if replicas < 1:
            msg = f"a failover needs at least one replica, not {replicas}"
            raise ValueError(msg)
        self.master_name = master_name
        self._replicas = replicas
        self._sentinel_count = sentinels
        self._down_after_ms = down_after_ms
        self._failover_timeout_ms = failover_timeout_ms
        self._extra_args = tuple(extra_args)
        self._startup_timeout = startup_timeout
        self._agree_timeout = agree_timeout
        self._stop_grace = stop_grace
        #: The data servers: the first one is the primary the setup started with.
        self.servers: list[RedisServer] = []
        self.sentinel_nodes: list[SentinelNode] = []

    # -- where things are -------------------------------------------------------

    @property
    def sentinels(self) -> list[tuple[str, int]]:
        """``(host, port)`` of every sentinel: what ``redis.asyncio.Sentinel`` takes."""
        return [(node.host, node.port) for node in self.sentinel_nodes]

    @property
    def url(self) -> str:
        """The ``redis+sentinel://`` URL of the primary, database 0."""
        hosts = ",".join(f"{host}:{port}" for host, port in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.master_name}/0"

    @property
    def primary(self) -> RedisServer:
        """The data server the sentinels name as primary now."""
        port = self.primary_port()
        for server in self.servers:
            if server.running and server.port == port:
                return server
        msg = f"the sentinels name port {port} as primary, which is not running"
        raise RuntimeError(msg)

    def primary_port(self) -> int:
        """The primary's port, as the first sentinel that answers says."""
        for node in self.sentinel_nodes:
            port = named_primary(node.port, self.master_name)
            if port is not None:
                return port
        msg = "no sentinel answers with the primary's address"
        raise RuntimeError(msg)

    # -- lifecycle --------------------------------------------------------------

    def start(self) -> RedisSentinel:
        """Start the primary, its replicas and the sentinels; wait until they agree."""
        if self.servers:
            msg = "the setup is already started"
            raise RuntimeError(msg)
        try:
            primary = self._data_server(())
            for _ in range(self._replicas):
                self._data_server(("--replicaof", LOOPBACK, str(primary.port)))
            self._wait(self._replicas_in_sync, "the replicas to sync")
            for _ in range(self._sentinel_count):
                node = SentinelNode(
                    master_name=self.master_name,
                    primary_port=primary.port,
                    down_after_ms=self._down_after_ms,
                    failover_timeout_ms=self._failover_timeout_ms,
                    startup_timeout=self._startup_timeout,
                    stop_grace=self._stop_grace,
                )
                self.sentinel_nodes.append(node)
                node.start()
            self._wait(self._sentinels_agree, "the sentinels to know each other")
        except BaseException:
            self.stop()
            raise
        return self

    def kill_primary(self) -> RedisServer:
        """SIGKILL the primary; return the replica promoted in its place.

        Returns once every sentinel names the new primary and it takes writes.
        """
        old = self.primary
        old.kill()
        return self.wait_for_promotion(old.port)

    def wait_for_promotion(self, old_port: int) -> RedisServer:
        """Wait until a replica replaced the primary on ``old_port``; return it."""

        def promoted() -> bool:
            try:
                port = self.primary_port()
            except RuntimeError:
                return False
            role = info(port, "replication").get("role")
            return port != old_port and role == "master" and self._all_name(port)

        self._wait(promoted, f"a replica promoted after port {old_port} died")
        return self.primary

    def rejoin(self, server: RedisServer) -> None:
        """Start a killed data server again, on its port and with its data.

        The sentinels turn it into a replica of the primary they name (it
        resyncs, dropping what the primary lacks); returns once every live data
        server follows that primary, linked.
        """
        server.restart(crash=True)
        self._wait(
            lambda: self.followed(self.primary_port()),
            f"port {server.port} to rejoin as a replica",
        )

    def epoch(self) -> int:
        """How many failovers the sentinels have tried (elections held) so far."""
        return max((node.epoch() for node in self.sentinel_nodes), default=0)

    def followed(self, port: int) -> bool:
        """Whether every other live data server replicates ``port``, linked."""
        for server in self.servers:
            if not server.running or server.port == port:
                continue
            found = info(server.port, "replication")
            linked = found.get("master_link_status") == "up"
            if not linked or found.get("master_port") != port:
                return False
        return True

    def stop(self) -> None:
        """Stop every process of the setup. Safe to call twice."""
        nodes = [*self.sentinel_nodes, *self.servers]
        self.sentinel_nodes, self.servers = [], []
        for node in nodes:
            node.stop()

    def __enter__(self) -> RedisSentinel:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        ports = [server.port for server in self.servers if server.running]
        return f"<{type(self).__name__} {self.master_name} servers={ports}>"

    # -- waiting ----------------------------------------------------------------

    def _data_server(self, role: Sequence[str]) -> RedisServer:
        sync = ("--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0")
        server = RedisServer(
            extra_args=(*sync, *role, *self._extra_args),
            startup_timeout=self._startup_timeout,
            stop_grace=self._stop_grace,
        )
        self.servers.append(server)
        return server.start()

    def _replicas_in_sync(self) -> bool:
        return all(
            info(server.port, "replication").get("master_link_status") == "up"
            for server in self.servers[1:]
        )

    def _sentinels_agree(self) -> bool:
        """Every sentinel sees the replicas and the other sentinels."""
        for node in self.sentinel_nodes:
            master = master_view(node.port, self.master_name)
            others = int(str(master.get("num-other-sentinels", 0)))
            replicas = int(str(master.get("num-slaves", 0)))
            if others < self._sentinel_count - 1 or replicas < self._replicas:
                return False
        return True

    def _all_name(self, port: int) -> bool:
        """Whether every live sentinel names ``port`` as the primary."""
        return all(
            named_primary(node.port, self.master_name) == port
            for node in self.sentinel_nodes
        )

    def _wait(self, condition: Callable[[], bool], what: str) -> None:
        interval = POLL_INTERVAL * 5
        if not poll_until(condition, timeout=self._agree_timeout, interval=interval):
            msg = f"timed out after {self._agree_timeout:g}s waiting for {what}"
            raise RuntimeError(msg)
