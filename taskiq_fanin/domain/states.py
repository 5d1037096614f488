"""The only state changes each record allows: states only move forward.

A group's meta holds the group's state and, from its dispatch on, its
continuation's; a chain's record holds the chain's, and (in a field of its own)
its error continuation's. The Lua scripts change a state only through these
tables (``storage/lua/prelude.lua`` gets them rendered
in), and a script asked for any other move fails instead of writing it.
"""

#: A group: planned open, claimed by the member that completes it (or by the
#: sweep, once giving it up has gone over its whole ledger), then handed to its
#: continuation; or cancelled while open.
GROUP_MOVES: dict[str, frozenset[str]] = {
    "open": frozenset({"claimed", "cancelled", "giving_up"}),
    # No outcome is recorded any more: the sweep goes over the ledger a window
    # at a time, noting the members without one as lost, then claims.
    "giving_up": frozenset({"claimed"}),
    # The continuation may start, or even complete, before its dispatch is
    # recorded; a group whose policy picks no continuation completes at once.
    "claimed": frozenset({"dispatched", "running", "completed"}),
    "cancelled": frozenset(),
}

#: A group's continuation, once enqueued: it runs (one copy at a time: a run
#: lease renewed or released within ``running``), then completes.
CONTINUATION_MOVES: dict[str, frozenset[str]] = {
    "dispatched": frozenset({"running", "completed"}),
    "running": frozenset({"completed"}),
    "completed": frozenset(),
}

#: A chain: it runs step after step (the step index moves, not the state), and
#: ends done, cancelled, or failing (the failure recorded) and then failed (its
#: error continuation and compensations kicked).
CHAIN_MOVES: dict[str, frozenset[str]] = {
    "running": frozenset({"done", "failing", "cancelled"}),
    "failing": frozenset({"failed"}),
    "done": frozenset(),
    "failed": frozenset(),
    "cancelled": frozenset(),
}

#: A chain's error continuation (``on_error``), once its chain failed and kicked
#: it: it runs (one copy at a time: a run lease renewed or released within
#: ``running``), then completes, and no copy runs after that.
ON_ERROR_MOVES: dict[str, frozenset[str]] = {
    "kicked": frozenset({"running"}),
    "running": frozenset({"completed"}),
    "completed": frozenset(),
}

#: What the scripts follow, by record: a group's meta (the group's states, then
#: its continuation's), a chain's record, and the error continuation's state in
#: that record (its own field, not ``state``).
MOVES: dict[str, dict[str, frozenset[str]]] = {
    "group": {**GROUP_MOVES, **CONTINUATION_MOVES},
    "chain": CHAIN_MOVES,
    "on_error": ON_ERROR_MOVES,
}


def may_move(record: str, before: str, after: str) -> bool:
    """Whether ``record`` may go from state ``before`` to ``after``."""
    return after in MOVES[record].get(before, frozenset())


def lua_table() -> str:
    """The tables as a Lua table literal, for the scripts' prelude."""
    records = []
    for record, moves in MOVES.items():
        states = ", ".join(
            f"{state} = {{{', '.join(f'{to} = true' for to in sorted(tos))}}}"
            for state, tos in moves.items()
        )
        records.append(f"{record} = {{{states}}}")
    return "{" + ", ".join(records) + "}"
