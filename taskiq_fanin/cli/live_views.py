"""What ``watch`` draws: a group's bar, a chain's steps with its group step's bar."""

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from taskiq_fanin.cli.snapshots import ChainView, GroupView, View
from taskiq_fanin.domain.readable import duration

#: Columns the bar takes.
BAR_WIDTH = 40
#: The states a group or a chain ends well in, drawn green; others end red.
_WELL = {"completed", "done"}
#: What a group whose members all ended is doing, until it reaches its end.
_AFTER_MEMBERS = {
    "claimed": "continuation next",
    "dispatched": "continuation queued",
    "running": "continuation running",
}


def _state(state: str, ended: bool) -> Text:
    style = "yellow" if not ended else "green" if state in _WELL else "red"
    return Text(state, style=f"bold {style}")


def group_lines(view: GroupView) -> RenderableType:
    """A group's bar with its numbers, then its counts and state."""
    style = "green" if view.ended and view.state in _WELL else "cyan"
    if view.failed or view.lost:
        style = "red" if view.ended else "magenta"
    bar = ProgressBar(
        total=max(view.total, 1),
        completed=min(view.finished, max(view.total, 1)),
        width=BAR_WIDTH,
        complete_style=style,
        finished_style=style,
    )
    rate = "-" if view.rate is None else f"{view.rate:.1f}/s"
    left = "left " + ("open" if view.open else duration(view.eta_seconds, digits=0))
    if view.members_ended:
        left = _AFTER_MEMBERS.get(view.state, "ended")
    line = Table.grid(padding=(0, 1))
    line.add_row(
        bar,
        f"{view.finished}/{view.total}",
        f"{view.percent:5.1f}%",
        f"{rate}",
        left,
    )
    counts = Text.assemble(
        ("state ", "bold"),
        _state(view.state, view.ended),
        f"  done {view.done}  failed {view.failed}  skipped {view.skipped}",
        f"  lost {view.lost}" if view.lost else "",
        f"  in flight {view.in_flight}" if view.in_flight is not None else "",
    )
    if not view.failures:
        return Group(line, counts)
    failures = Table(
        title="latest failures", title_justify="left", box=None, show_header=False
    )
    failures.add_column("member", justify="right", style="red", no_wrap=True)
    failures.add_column("error", overflow="ellipsis", no_wrap=True)
    for failure in view.failures:
        failures.add_row(f"#{failure.index}", Text(failure.error))
    return Group(line, counts, failures)


def group_screen(view: GroupView) -> RenderableType:
    """A group being watched."""
    return Group(Text(f"Group {view.group_id}", style="bold"), group_lines(view))


def chain_screen(view: ChainView) -> RenderableType:
    """A chain being watched: its steps, the current one marked, a group step's bar."""
    title = Text.assemble(
        (f"Chain {view.chain_id}  ", "bold"),
        _state(view.state, view.ended),
        f"  step {view.step} of {view.steps}",
    )
    parts: list[RenderableType] = [title]
    width = max((len(name) for name in view.step_names), default=0)
    digits = len(str(view.steps))
    for number, name in enumerate(view.step_names, start=1):
        state = _step_state(view, number)
        current = number == view.step and not view.ended
        parts.append(
            Text.assemble(
                (">" if current else " ", "bold"),
                f" {number:>{digits}}  {name:<{width}}  ",
                (state, "bold yellow" if current else ""),
            )
        )
        if current and view.group is not None:
            parts.append(Padding(group_lines(view.group), (0, 0, 0, digits + 3)))
    if view.error:
        parts.append(Text(f"error: {view.error}", style="red"))
    return Group(*parts)


def _step_state(view: ChainView, number: int) -> str:
    """What became of one step, judged from where the chain is."""
    if view.state == "done" or number < view.step:
        return "done"
    if number > view.step:
        return "waiting" if not view.ended else "not run"
    return "running" if not view.ended else view.state


def screen(view: View) -> RenderableType:
    """What the terminal shows of one read."""
    return group_screen(view) if isinstance(view, GroupView) else chain_screen(view)
