"""Labels are parsed strictly: anything but what the library writes is "not
ours", logged once, and the message runs as a plain task; nothing raises."""

import logging
import uuid

import pytest
from fakeredis.aioredis import FakeRedis
from taskiq import InMemoryBroker, TaskiqMessage, TaskiqResult

from taskiq_fanin import FanInMiddleware
from taskiq_fanin.chains.cursor import CHAIN_LABEL, ChainCursor
from taskiq_fanin.domain.labels import (
    CONTINUATION_LABEL,
    DEPTH_LABEL,
    MEMBER_LABEL,
    RETRIES_LABEL,
    ContinuationRef,
    MemberRef,
    attempt_of,
    depth_of,
)


@pytest.mark.parametrize(
    "value",
    [
        "g/²/tok",  # a superscript digit: str.isdigit() says yes
        "g/٣/tok",  # an Arabic-Indic three: int() reads 3
        "g/-1/tok",
        "g/1e3/tok",
        "g/1234567890/tok",  # wider than any group
        "g/1/",
        "g/1/tok/extra",
        "g{x}/1/tok",  # would break the hash tag
        "/1/tok",
        "g/1/tok en",
        "x" * 300 + "/1/tok",
    ],
)
def test_a_malformed_member_label_is_not_ours(value: str) -> None:
    assert MemberRef.from_labels({MEMBER_LABEL: value}) is None


def test_a_member_label_as_written_is_read_back() -> None:
    ref = MemberRef(group_id="album-7~3~r2", index=12, token="a1b2c3")
    assert MemberRef.from_labels(ref.label()) == ref


@pytest.mark.parametrize("value", ["g/tok/then", "g/tok/on_error"])
def test_a_continuation_label_as_written_is_read_back(value: str) -> None:
    ref = ContinuationRef.from_labels({CONTINUATION_LABEL: value})
    assert ref is not None
    assert ref.label() == {CONTINUATION_LABEL: value}


@pytest.mark.parametrize("value", ["g/tok/later", "g/tok", "g{/tok/then", "g/t k/then"])
def test_a_malformed_continuation_label_is_not_ours(value: str) -> None:
    assert ContinuationRef.from_labels({CONTINUATION_LABEL: value}) is None


@pytest.mark.parametrize(("value", "read"), [("2", 2), ("²", 0), ("٣", 0), ("x", 0)])
def test_counts_in_labels_are_ascii_digits(value: str, read: int) -> None:
    assert attempt_of({RETRIES_LABEL: value}) == read
    assert depth_of({DEPTH_LABEL: value}) == read


async def test_a_message_with_malformed_labels_runs_as_a_plain_task_logged_once(
    fake_redis: FakeRedis, caplog: pytest.LogCaptureFixture
) -> None:
    fanin = FanInMiddleware(fake_redis, prefix="labels")
    broker = InMemoryBroker().with_middlewares(fanin)
    await broker.startup()
    fresh = uuid.uuid4().hex  # values no other test had logged already
    labels = {
        MEMBER_LABEL: f"g{fresh}/²/tok",
        CONTINUATION_LABEL: f"g{fresh}/tok/later",
        CHAIN_LABEL: "{not json " + fresh,
        RETRIES_LABEL: "٣",
    }
    message = TaskiqMessage(
        task_id="t1", task_name="plain", labels=labels, args=[], kwargs={}
    )
    done = TaskiqResult(is_err=False, return_value=1, execution_time=0.0)
    try:
        with caplog.at_level(logging.WARNING, logger="taskiq_fanin"):
            for _ in range(2):  # a redelivery: logged once all the same
                assert await fanin.pre_execute(message) is message
                await fanin.post_execute(message, done)
    finally:
        await broker.shutdown()
    malformed = [r for r in caplog.records if "Malformed" in r.getMessage()]
    assert sorted(r.getMessage().split()[1] for r in malformed) == [
        CHAIN_LABEL,
        CONTINUATION_LABEL,
        MEMBER_LABEL,
    ]
    assert await fake_redis.keys("*") == []  # nothing recorded, nothing guarded
    assert ChainCursor.from_labels(labels) is None
