"""A throwaway Sentinel setup: a primary, replicas and three sentinels on loopback.

Every process is a ``redis-server`` on a free loopback port (the sentinels run
with ``--sentinel`` and a config file of their own, which they rewrite), in its
own process group, stopped at the end. The sentinels notice a dead primary
within ``down_after_ms`` and promote a replica; :meth:`RedisSentinel.kill_primary`
SIGKILLs the primary and returns once a replica is promoted and writable.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from types import TracebackType

import redis
from redis.exceptions import RedisError

from local_redis.server import (
    DEFAULT_STARTUP_TIMEOUT,
    DEFAULT_STOP_GRACE,
    LOOPBACK,
    POLL_INTERVAL,
    RedisServer,
)

#: The name the sentinels know the primary by.
DEFAULT_MASTER_NAME = "fanin-primary"
#: A primary that does not answer for this long is down (Sentinel's own: 30 s).
DEFAULT_DOWN_AFTER_MS = 1000
#: How long one failover may take before another is tried (Sentinel's: 3 min).
DEFAULT_FAILOVER_TIMEOUT_MS = 3000
#: How long a setup may take to agree (replicas in sync, sentinels known).
DEFAULT_AGREE_TIMEOUT = 30.0
#: Sentinels that must agree the primary is down: a majority of three.
_QUORUM = 2


def _client(port: int) -> redis.Redis:
    return redis.Redis(
        host=LOOPBACK,
        port=port,
        socket_timeout=1.0,
        socket_connect_timeout=1.0,
        decode_responses=True,
    )


def _named_primary(sentinel_port: int, master_name: str) -> int | None:
    """The primary's port as the sentinel on ``sentinel_port`` names it, if it does."""
    client = _client(sentinel_port)
    try:
        found: object = client.sentinel_get_master_addr_by_name(master_name)
    except RedisError:
        return None
    finally:
        client.close()
    if isinstance(found, list | tuple) and len(found) == 2:
        return int(found[1])
    return None


def _info(port: int, section: str) -> dict[str, object]:
    """``INFO section`` of the server on ``port``, empty when it does not answer."""
    client = _client(port)
    try:
        found: dict[str, object] = client.info(section)
    except RedisError:
        return {}
    finally:
        client.close()
    return found


class _SentinelNode(RedisServer):
    """``redis-server --sentinel`` watching one primary, with its own config file."""

    def __init__(
        self,
        *,
        master_name: str,
        primary_port: int,
        down_after_ms: int,
        failover_timeout_ms: int,
        startup_timeout: float,
        stop_grace: float,
    ) -> None:
        super().__init__(startup_timeout=startup_timeout, stop_grace=stop_grace)
        self._watch = (master_name, primary_port, down_after_ms, failover_timeout_ms)

    def _server_args(self, port: int) -> list[str]:
        name, primary, down_after, failover = self._watch
        config = self.directory / "sentinel.conf"
        if not config.exists():  # a restart keeps what the sentinel learnt
            config.write_text(
                f"sentinel monitor {name} {LOOPBACK} {primary} {_QUORUM}\n"
                f"sentinel down-after-milliseconds {name} {down_after}\n"
                f"sentinel failover-timeout {name} {failover}\n"
                f"sentinel parallel-syncs {name} 1\n"
            )
        return [
            str(config), "--sentinel",
            "--port", str(port),
            "--bind", LOOPBACK,
            "--dir", str(self.directory),
            "--daemonize", "no",
        ]  # fmt: skip


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
        self.sentinel_nodes: list[RedisServer] = []

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
            port = _named_primary(node.port, self.master_name)
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
                node = _SentinelNode(
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
            role = _info(port, "replication").get("role")
            return port != old_port and role == "master" and self._all_name(port)

        self._wait(promoted, f"a replica promoted after port {old_port} died")
        return self.primary

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
            _info(server.port, "replication").get("master_link_status") == "up"
            for server in self.servers[1:]
        )

    def _sentinels_agree(self) -> bool:
        """Every sentinel sees the replicas and the other sentinels."""
        for node in self.sentinel_nodes:
            client = _client(node.port)
            try:
                master: object = client.sentinel_master(self.master_name)
            except RedisError:
                return False
            finally:
                client.close()
            if not isinstance(master, dict):
                return False
            others = int(master.get("num-other-sentinels", 0))
            replicas = int(master.get("num-slaves", 0))
            if others < self._sentinel_count - 1 or replicas < self._replicas:
                return False
        return True

    def _all_name(self, port: int) -> bool:
        """Whether every live sentinel names ``port`` as the primary."""
        return all(
            _named_primary(node.port, self.master_name) == port
            for node in self.sentinel_nodes
        )

    def _wait(self, condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + self._agree_timeout
        while not condition():
            if time.monotonic() > deadline:
                msg = f"timed out after {self._agree_timeout:g}s waiting for {what}"
                raise RuntimeError(msg)
            time.sleep(POLL_INTERVAL * 5)
