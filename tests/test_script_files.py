"""The scripts' shape: found in their folder, named for what they do and the keys
they take, answering in the reply codes of ``storage/replies.py`` by name.
"""

import enum
import hashlib
import re
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from taskiq_fanin.domain.config import DEFAULT_OUTCOME_STREAM_MAX as STREAM_MAX
from taskiq_fanin.storage.chain_scripts import ChainScripts
from taskiq_fanin.storage.group_scripts import GroupScripts
from taskiq_fanin.storage.keys import ChainKeys, GroupKeys
from taskiq_fanin.storage.rechecks import Lost
from taskiq_fanin.storage.replies import (
    REPLY_CODES,
    Added,
    Advanced,
    Applied,
    Begin,
    Cancel,
    Created,
    Failed,
    Finished,
    Outcome,
    Recorded,
    Sealed,
    Started,
)
from taskiq_fanin.storage.scripts import packaged, prelude
from taskiq_fanin.transport.pipeline import Command, PipelineBatcher

#: What each script answers in: the enum its wrapper parses the reply with
#: (None: it answers with data alone).
ANSWERS: dict[str, type[enum.IntEnum] | None] = {
    "abandonGroup": Applied,
    "addMembers": Added,
    "advanceChain": Advanced,
    "appendLedger": Applied,
    "beginContinuation": Begin,
    "beginFailingChain": Failed,
    "beginOnError": Begin,
    "beginStep": Begin,
    "checkContinuation": Lost,
    "checkOnError": Lost,
    "cancelChain": Cancel,
    "cancelGroup": Applied,
    "collectOutcomes": None,
    "completeOnError": Applied,
    "countRedispatch": Applied,
    "countRekick": Applied,
    "createGroup": Created,
    "endFailingChain": Applied,
    "finishChain": Finished,
    "giveUp": Applied,
    "inspectChain": None,
    "inspectGroup": None,
    "keepChain": Applied,
    "listDue": None,
    "markCompleted": Applied,
    "markDispatched": Applied,
    "markPlanned": Applied,
    "markSettled": Applied,
    "reclaimFinaliser": Applied,
    "recordOutcome": Recorded,
    "redriveChain": Applied,
    "redriveGroup": Applied,
    "releaseContinuation": Applied,
    "releaseLock": Applied,
    "releaseOnError": Applied,
    "releasePlanner": Applied,
    "releaseStep": Applied,
    "scheduleSweep": Applied,
    "sealGroup": Sealed,
    "startChain": Started,
}

_CODE = re.compile(r"\b([A-Z][a-z]\w*)\.([A-Z][A-Z_]*)\b")


def _header_and_body(name: str) -> tuple[str, str]:
    source = packaged()[name].source.removeprefix(prelude())
    header, _, body = source.partition("]]\n")
    assert header.startswith("--[["), name
    return header, body


def test_the_scripts_are_the_files_of_their_folder() -> None:
    assert set(packaged()) == set(ANSWERS)
    for name, script in packaged().items():
        assert script.filename == f"{name}-{script.keys}.lua"


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_a_script_takes_and_uses_exactly_the_keys_its_name_counts(name: str) -> None:
    declared = packaged()[name].keys
    header, body = _header_and_body(name)
    listed = [int(n) for n in re.findall(r"KEYS\[(\d+)\]", header)]
    assert listed == list(range(1, declared + 1)), "its header lists every key"
    used = {int(n) for n in re.findall(r"KEYS\[(\d+)\]", body)}
    if "ipairs(KEYS)" not in body:
        assert used == set(listed), "each key it is given, it uses"
    assert used <= set(listed)


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_no_script_returns_a_bare_number(name: str) -> None:
    _, body = _header_and_body(name)
    assert not re.search(r"\breturn\s+\{?\s*-?\d", body)
    assert not re.search(r"codes?(\[\w+\])?\s*==?\s*-?\d", body)
    assert not re.search(r"table\.insert\(\w+, 1, -?\d+\)", body)


@pytest.mark.parametrize("name", sorted(ANSWERS))
def test_a_script_answers_in_the_codes_its_wrapper_reads(name: str) -> None:
    header, body = _header_and_body(name)
    used = set(_CODE.findall(body))
    answers = ANSWERS[name]
    if answers is None:
        assert not used
        return
    assert used, "it answers with a code"
    assert {codes for codes, _ in used} == {answers.__name__}
    assert {member for _, member in used} <= set(answers.__members__)
    # Its header says what it returns in the same names.
    assert {member for _, member in used} <= {
        member for codes, member in _CODE.findall(header) if codes == answers.__name__
    }


def test_every_reply_code_is_answered_by_some_script() -> None:
    answered = {
        code for name in ANSWERS for code in _CODE.findall(_header_and_body(name)[1])
    }
    for codes in REPLY_CODES:
        for member in codes:
            assert (codes.__name__, member.name) in answered


def test_the_prelude_renders_the_codes_from_the_enums() -> None:
    assert (
        "local Recorded = codes('Recorded', {RECORDED = 1, CLAIMED = 2, DUPLICATE = 3"
        in prelude()
    )
    for codes in REPLY_CODES:
        assert f"local {codes.__name__} = codes(" in prelude()


async def test_a_code_by_name_is_its_number_and_an_unknown_name_fails(
    client: Redis,
) -> None:
    known = client.register_script(
        prelude() + "return {Recorded.CLAIMED, Finished.MISSING, Applied.APPLIED}"
    )
    assert await known() == [Recorded.CLAIMED, Finished.MISSING, Applied.APPLIED]
    unknown = client.register_script(prelude() + "return Recorded.CLAMED")
    with pytest.raises(ResponseError, match="Recorded has no reply code CLAMED"):
        await unknown()


class _Spy:
    """A pipeline that notes every script call: which script, how many keys."""

    def __init__(self, pipe: Any, calls: list[tuple[str, int]]) -> None:
        self._pipe, self._calls = pipe, calls

    def execute_command(self, *args: Any) -> Any:
        if args[0] == "EVALSHA":
            self._calls.append((args[1], int(args[2])))
        return self._pipe.execute_command(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._pipe, name)


class SpyingPipeline(PipelineBatcher):
    def __init__(self, client: Redis) -> None:
        super().__init__(client)
        self.calls: list[tuple[str, int]] = []

    async def __call__(self, command: Command, *, written: Any = None) -> Any:
        return await super().__call__(
            lambda pipe: command(_Spy(pipe, self.calls)), written=written
        )

    async def now(self, command: Command, *, written: Any = None) -> Any:
        return await super().now(
            lambda pipe: command(_Spy(pipe, self.calls)), written=written
        )


async def test_every_wrapper_passes_its_script_the_keys_its_name_counts(
    client: Redis, key_prefix: str
) -> None:
    pipeline = SpyingPipeline(client)
    groups = GroupScripts(client, pipeline)
    chains = ChainScripts(client, pipeline)
    group, chain = GroupKeys(key_prefix, "g"), ChainKeys(key_prefix, "c")
    token, index = "tok", f"{key_prefix}:index"

    await groups.create_group(
        group,
        token=token,
        options={"span": 60_000, "ttl": 60_000},
        members=["m0"],
        planner_lease_ms=1_000,
        claimant="p",
        sealed=False,
    )
    await groups.add_members(group, batch="b", most=10, members=["m1"])
    await groups.append_ledger(group, token=token, first=1, members=["m1"], seal=True)
    await groups.seal_group(group, lease_ms=1_000, claimant="p")
    await groups.abandon_group(group, token=token)  # refused: sealed
    await groups.release_planner(group, token=token)
    await groups.mark_planned(group, token=token)
    await groups.inspect_group(group)
    await groups.record_outcome(
        group,
        token=token,
        index=0,
        outcome=Outcome.DONE,
        payload="",
        lease_ms=1_000,
        claimant="w",
        delivery="d",
        stream_max=STREAM_MAX,
    )
    await groups.redrive_group(group, token=token, max_redrives=1)
    await groups.give_up(group, token=token, lease_ms=1_000, claimant="s")
    await groups.collect_outcomes(group, token=token)
    await groups.reclaim_finaliser(group, token=token, lease_ms=1_000, claimant="s")
    await groups.check_continuation(group, token=token, max_redrives=1)
    await groups.count_redispatch(group, token=token)
    args = {"token": token, "dispatched": "then", "tombstone_ms": 1_000}
    await groups.mark_dispatched(group, **args, claimant="s")
    await groups.begin_continuation(
        group, token=token, attempt=0, delivery="d", lease_ms=1_000
    )
    await groups.release_continuation(group, token=token, attempt=0, delivery="d")
    await groups.mark_completed(group, token=token, tombstone_ms=1_000)
    await groups.cancel_group(group, tombstone_ms=1_000)
    await groups.schedule(index, "g", after_ms=0, mode="set")
    await groups.due(index, batch=10)
    await groups.release_lock(f"{key_prefix}:lock", "me")

    await chains.start(
        chain,
        token=token,
        names="[]",
        steps=2,
        ttl_ms=60_000,
        pending="",
        deadline_ms=1,
    )
    step = {"token": token, "step": 0}
    await chains.begin_step(chain, **step, attempt=0, delivery="d", lease_ms=1_000)
    await chains.release_step(chain, **step, attempt=0, delivery="d")
    await chains.advance(
        chain, **step, compensation="", ttl_ms=60_000, pending="", delivery="d"
    )
    await chains.inspect(chain)
    await chains.redrive(chain, token=token, max_redrives=1, ttl_ms=60_000)
    await chains.keep(chain, token=token, step=1, until_ms=2**40)
    await chains.begin_failing(chain, token=token, step=1, error="{}", delivery="d")
    await chains.end_failing(chain, token=token)
    await chains.begin_on_error(
        chain, token=token, attempt=0, delivery="d", lease_ms=1_000
    )
    await chains.release_on_error(
        chain, token=token, attempt=0, delivery="d", deadline_ms=1_000
    )
    await chains.check_on_error(chain, token=token, max_redrives=1, deadline_ms=1_000)
    await chains.count_rekick(chain, token=token)
    await chains.complete_on_error(chain, token=token)
    await chains.mark_settled(chain, token=token)
    await chains.finish(chain, token=token, step=1, delivery="d")
    await chains.cancel(chain)

    names = {
        hashlib.sha1(script.source.encode()).hexdigest(): name
        for name, script in packaged().items()
    }
    passed = {(names[sha], keys) for sha, keys in pipeline.calls}
    assert passed == {(name, script.keys) for name, script in packaged().items()}
