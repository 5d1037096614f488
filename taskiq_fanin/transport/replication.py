"""Under ``durability="replicated"``: a pipeline's writes are followed by ``WAIT``.

Replication is asynchronous: a promoted replica may lack the last writes its
old primary acknowledged. ``WAIT <replicas> <timeout>`` after the writes, in
the same pipeline (so on the same connection, in the same round trip), answers
how many replicas hold them; fewer than asked, and the writes are treated as
not done (:class:`NotReplicatedError`, a kind of Redis being away, which the
hooks retry: every write the library sends is idempotent). One ``WAIT`` covers
every write before it on its connection, so a pipeline carries one, however
many writes it has; a pipeline of reads carries none. ``WAIT`` covers the
connection's last write only, and a retried script finds its first attempt's
write and writes nothing: so a short-lived probe key on the write's slot is set
before each ``WAIT``, which then covers everything the primary holds.

On a Redis Cluster a pipeline is split by node, each part on its own
connection: one ``WAIT`` goes to each node that took a write, by
``target_nodes`` (redis-py routes a keyless ``WAIT`` to every primary, which a
pipeline refuses). redis-py re-sends a command a node answered ``MOVED`` on
another connection, which that node's ``WAIT`` does not cover: a write whose
slot changed node during the round trip is treated as not done too.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import RedisCluster

from taskiq_fanin.domain.config import Durability, FanInConfig, ms
from taskiq_fanin.domain.exceptions import NotReplicatedError
from taskiq_fanin.transport.client import RedisClient

#: The node of a plain client (a single server, or Sentinel's primary).
_ONE = ""
#: How long a probe key lives (ms).
PROBE_MS = 10_000


def probe_key(key: Any) -> str:
    """A key on ``key`` 's slot, under its prefix: ``p:{tag}:replicated``."""
    text = key.decode() if isinstance(key, bytes) else str(key)
    start = text.find("{")
    end = text.find("}", start + 1)
    if start >= 0 and end > start + 1:
        return f"{text[: end + 1]}:replicated"
    return f"{text}:{{{text}}}:replicated"  # its own name as the hash tag


@dataclass(frozen=True)
class Replication:
    """How many replicas must acknowledge a write, and how long to wait (ms)."""

    replicas: int
    timeout_ms: int

    def follow(self, client: RedisClient, pipe: Any, written: Sequence[Any]) -> "Waits":
        """Add the ``WAIT`` s that follow writes to ``written`` keys to ``pipe``."""
        waits = Waits(self)
        if not isinstance(client, RedisCluster):
            waits.nodes.append(_ONE)
            pipe.set(probe_key(written[0]), 1, px=PROBE_MS)
            pipe.execute_command("WAIT", self.replicas, self.timeout_ms)
            return waits
        for key in written:
            slot = client.keyslot(key)
            node = client.nodes_manager.get_node_from_slot(slot)
            waits.slots[slot] = node.name
            if node.name not in waits.nodes:
                waits.nodes.append(node.name)
                pipe.set(probe_key(key), 1, px=PROBE_MS)
                pipe.execute_command(
                    "WAIT", self.replicas, self.timeout_ms, target_nodes=node
                )
        return waits


def replication(config: FanInConfig) -> Replication | None:
    """What a write waits for under ``config``'s durability (``None``: nothing)."""
    if config.durability is not Durability.REPLICATED:
        return None
    return Replication(config.replicas, ms(config.replication_timeout))


@dataclass
class Waits:
    """The ``WAIT`` s one pipeline carries: one per node that took a write."""

    replication: Replication
    nodes: list[str] = field(default_factory=list)
    #: Of a cluster: the slot of each write, and the node its WAIT went to.
    slots: dict[int, str] = field(default_factory=dict)
    #: After the round trip: why the writes of a node are not done (or None).
    failed: dict[str, Exception | None] = field(default_factory=dict)

    def heard(self, client: RedisClient, replies: Sequence[Any]) -> None:
        """Read the ``WAIT`` s' replies (the pipeline's last ones, in order)."""
        wanted = self.replication.replicas
        # Each node's probe, then its WAIT.
        pairs = zip(self.nodes, replies[0::2], replies[1::2], strict=True)
        for node, probe, acked in pairs:
            reply = probe if isinstance(probe, Exception) else acked
            if isinstance(reply, Exception) or int(reply) < wanted:
                self.failed[node] = self._not_replicated(reply)
            else:
                self.failed[node] = None
        if isinstance(client, RedisCluster):
            for slot, node in self.slots.items():
                holders = client.nodes_manager.slots_cache.get(slot)
                if not holders or holders[0].name != node:
                    self.failed[f"{node}/{slot}"] = self._not_replicated(
                        ValueError(f"slot {slot} left {node} during the round trip")
                    )

    def failure(self, client: RedisClient, key: Any) -> Exception | None:
        """Why a write to ``key`` is not done, or ``None``: it is replicated."""
        if not isinstance(client, RedisCluster):
            return self.failed.get(_ONE)
        slot = client.keyslot(key)
        node = self.slots[slot]
        return self.failed.get(f"{node}/{slot}") or self.failed.get(node)

    def _not_replicated(self, reply: Any) -> NotReplicatedError:
        error = NotReplicatedError(
            acknowledged=repr(reply) if isinstance(reply, Exception) else str(reply),
            replicas=self.replication.replicas,
            timeout_ms=self.replication.timeout_ms,
        )
        if isinstance(reply, Exception):
            error.__cause__ = reply
        return error
