"""States only move forward: one table per record, and the scripts follow it.

Every pair of states of every record is tried against the Lua ``move`` the
scripts use (on fakeredis and on a real server): the allowed moves go through,
every other one is refused and writes nothing. The tables themselves have no way
back: each is acyclic, and its terminal states have no move out.
"""

import itertools

import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from taskiq_fanin.domain.states import (
    CHAIN_MOVES,
    CONTINUATION_MOVES,
    GROUP_MOVES,
    MOVES,
    ON_ERROR_MOVES,
    may_move,
)
from taskiq_fanin.storage.scripts import prelude

#: Runs the prelude's ``move`` on one hash: KEYS[1], ARGV record, from, to.
MOVE = (
    prelude()
    + """
redis.call('HSET', KEYS[1], 'state', ARGV[2])
move(KEYS[1], ARGV[1], ARGV[2], ARGV[3])
return redis.call('HGET', KEYS[1], 'state')
"""
)


def every_pair() -> list[tuple[str, str, str]]:
    pairs = []
    for record, moves in MOVES.items():
        states = set(moves) | {s for tos in moves.values() for s in tos}
        pairs += [
            (record, a, b) for a, b in itertools.product(sorted(states), repeat=2)
        ]
    return pairs


@pytest.mark.parametrize(
    "tables", [(GROUP_MOVES, CONTINUATION_MOVES), (CHAIN_MOVES,), (ON_ERROR_MOVES,)]
)
def test_no_table_has_a_way_back(tables: tuple[dict[str, frozenset[str]], ...]) -> None:
    moves: dict[str, frozenset[str]] = {}
    for table in tables:
        moves.update(table)

    # Depth-first: a state reached again on its own path would be a cycle.
    def forward_only(state: str, path: tuple[str, ...]) -> bool:
        return all(
            to not in path and forward_only(to, (*path, to))
            for to in moves.get(state, frozenset())
        )

    assert all(forward_only(state, (state,)) for state in moves)
    terminal = {state for state, tos in moves.items() if not tos}
    assert terminal  # every life ends somewhere


def test_the_group_table_hands_over_to_the_continuations() -> None:
    handed = set().union(*GROUP_MOVES.values()) - set(GROUP_MOVES)
    assert handed <= set(CONTINUATION_MOVES)
    assert MOVES["group"] == {**GROUP_MOVES, **CONTINUATION_MOVES}


async def test_the_scripts_move_exactly_as_the_tables_allow(
    client: Redis, key_prefix: str
) -> None:
    script = client.register_script(MOVE)
    key = f"{key_prefix}:record"
    refused = allowed = 0
    for record, before, after in every_pair():
        if may_move(record, before, after):
            assert await script(keys=[key], args=[record, before, after]) == (
                after.encode()
            )
            allowed += 1
        else:
            with pytest.raises(ResponseError, match="may not move"):
                await script(keys=[key], args=[record, before, after])
            # The refusal stopped the script before it wrote the new state.
            assert await client.hget(key, "state") == before.encode()
            refused += 1
    assert allowed == sum(
        len(tos) for moves in MOVES.values() for tos in moves.values()
    )
    assert refused > allowed  # most pairs are not moves at all
