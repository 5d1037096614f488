"""Storage: what the library keeps in Redis, and how it is read and changed.

The key layout, the typed records (a group's meta, a chain's record), the Lua
scripts with one typed wrapper each, their replies as enums and dataclasses,
and the bounded reads of ledgers and result pages. What carries the commands
(pipelines, batching, replication) is ``transport``'s.
"""
