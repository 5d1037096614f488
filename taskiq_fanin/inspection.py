"""Reading groups and chains by kind, and listing them.

For one id, ``taskiq_fanin.status(broker, id)`` (or a handle's ``status()``) is
enough: it looks the id up as everywhere, a group first, then a chain. These
read one kind only, or list what the sweep's index holds (as
``taskiq-fanin list`` does), and ``progress(broker, id)``: a group's or a
chain's progress by id, as ``status`` looks it up.
"""

from taskiq_fanin.api.control import (
    chain_status,
    group_status,
    list_chains,
    list_groups,
    progress,
)

__all__ = ["chain_status", "group_status", "list_chains", "list_groups", "progress"]
