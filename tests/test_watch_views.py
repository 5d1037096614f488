"""What ``watch`` draws and prints from one read, without Redis: a group's bar
and numbers, a chain's steps with the current one marked and its group step's
bar inside, the JSON line, and when a new line is due.
"""

from dataclasses import replace
from datetime import datetime, timezone

from rich.console import Console

from taskiq_fanin import ChainStatus, MemberError
from taskiq_fanin.cli.failures import Failure, error_text
from taskiq_fanin.cli.live_views import screen
from taskiq_fanin.cli.output import chain_table
from taskiq_fanin.cli.snapshots import ChainView, GroupView, changed, view_doc
from taskiq_fanin.models import ChainState

GROUP = GroupView(
    group_id="album-7",
    state="open",
    total=200,
    done=140,
    failed=6,
    skipped=4,
    lost=0,
    open=False,
    in_flight=None,
    rate=50.0,
    eta_seconds=1.0,
    percent=75.0,
    members_ended=False,
    failures=(Failure(7, "ValueError: no such page"),),
)
CHAIN = ChainView(
    chain_id="video-3",
    state="running",
    step=2,
    steps=3,
    step_names=["probe", "group of 200", "publish"],
    done=1,
    failed=0,
    group=GROUP,
    error=None,
)


def drawn(view: GroupView | ChainView) -> str:
    console = Console(width=120, record=True, color_system=None)
    console.print(screen(view))
    return console.export_text()


def test_a_group_shows_its_bar_numbers_pace_and_latest_failures() -> None:
    text = drawn(GROUP)

    assert "Group album-7" in text
    assert "150/200" in text  # done, failed and skipped: members ended
    assert " 75.0%" in text
    assert "50.0/s" in text
    assert "left 1s" in text
    assert "done 140  failed 6  skipped 4" in text
    assert "latest failures" in text
    assert "#7  ValueError: no such page" in text


def test_a_group_whose_members_ended_says_what_it_waits_for() -> None:
    queued = replace(GROUP, state="dispatched", done=190, members_ended=True)

    assert "continuation queued" in drawn(queued)


def test_a_chain_marks_its_current_step_and_shows_its_group_step_bar_under_it() -> None:
    lines = drawn(CHAIN).splitlines()

    assert lines[0].startswith("Chain video-3  running  step 2 of 3")
    assert lines[1].startswith("  1  probe         done")
    assert lines[2].startswith("> 2  group of 200  running")
    assert "150/200" in lines[3]  # the group's bar, under its step
    assert lines[-1].startswith("  3  publish       waiting")


def test_a_chain_that_failed_marks_no_step_and_shows_its_error() -> None:
    failed = replace(CHAIN, state="failed", failed=1, group=None, error="Boom: no")
    text = drawn(failed)

    assert ">" not in text
    assert "2  group of 200  failed" in text
    assert "publish       not run" in text
    assert "error: Boom: no" in text


def test_the_json_line_of_a_chain_counts_steps_and_holds_its_group() -> None:
    document = view_doc(CHAIN)

    assert document["kind"] == "chain"
    assert (document["done"], document["total"], document["step"]) == (1, 3, 2)
    assert document["step_name"] == "group of 200"
    assert document["group"]["done"] == 140
    assert document["group"]["failures"] == [
        {"index": 7, "error": "ValueError: no such page"}
    ]


def test_a_new_line_is_due_when_counts_move_not_when_only_the_pace_does() -> None:
    before = view_doc(GROUP)

    assert changed(None, before)
    assert not changed(before, view_doc(replace(GROUP, rate=9.0, eta_seconds=3.0)))
    assert changed(before, view_doc(replace(GROUP, done=141)))
    chain = view_doc(CHAIN)
    paced = view_doc(replace(CHAIN, group=replace(GROUP, rate=1.0)))
    assert not changed(chain, paced)


def test_an_error_is_shown_as_type_and_message_cut_short() -> None:
    assert error_text(MemberError(type="Skip", message="")) == "Skip"
    long = error_text(MemberError(type="E", message="x" * 500))
    assert len(long) == 160
    assert long.endswith("…")


#: Member text that rich would read as markup: a stray closing tag (an error
#: then), a style and a terminal hyperlink (member text restyling the screen).
MARKUP = "bad [/x] in [bold red]list[/bold red] [link=http://evil.example]click[/link]"


def test_a_failure_s_text_is_shown_as_it_is_never_read_as_markup() -> None:
    view = replace(GROUP, failures=(Failure(3, f"ValueError: {MARKUP}"),))
    console = Console(width=200, record=True, color_system="truecolor")
    console.print(screen(view))

    assert f"#3  ValueError: {MARKUP}" in console.export_text()
    assert "evil.example" not in console.export_text(styles=True).replace(MARKUP, "")


def test_a_chain_s_status_table_shows_its_error_and_names_as_they_are() -> None:
    status = ChainStatus(
        chain_id="c[1]",
        state=ChainState.FAILED,
        step=1,
        steps=2,
        step_names=["probe", f"step {MARKUP}"],
        failed_step=1,
        error=MemberError(type="RuntimeError", message=MARKUP),
        name="[bold]named[/bold]",
    )
    console = Console(width=400, record=True, color_system=None)
    console.print(chain_table(status, datetime.now(timezone.utc)))
    text = console.export_text()

    assert "Chain c[1]" in text
    assert f"RuntimeError: {MARKUP}" in text
    assert f"step {MARKUP}" in text
    assert "[bold]named[/bold]" in text
