"""The group's page: live progress, its failures, a page of its members, actions."""

import json
from datetime import datetime

from taskiq_fanin.domain.results import GroupState, GroupStatus
from taskiq_fanin.web.queries import Member
from taskiq_fanin.web.render import (
    duration,
    error_text,
    esc,
    group_href,
    page,
    pager,
    progress_doc,
    when,
)

GROUP_SCRIPT = """
window.faninLoadedAt = Date.now();
const source = new EventSource(location.pathname + "/events");
source.addEventListener("progress", (event) => {
  const p = JSON.parse(event.data);
  const bar = document.getElementById("bar");
  bar.max = Math.max(p.total, 1); bar.value = p.ended;
  document.getElementById("count").textContent = p.ended + "/" + p.total;
  document.getElementById("percent").textContent = p.percent.toFixed(1) + "%";
  document.getElementById("state").textContent = p.state;
  for (const k of ["done", "failed", "skipped", "lost"]) {
    document.getElementById("n-" + k).textContent = p[k];
  }
  if (p.over) { source.close(); }
});
"""


def _members_table(items: list[Member]) -> str:
    rows = []
    for member in items:
        detail = (
            esc(json.dumps(member.result, default=str)[:200])
            if member.state == "done"
            else esc(error_text(member.error))
            if member.error
            else ""
        )
        rows.append(
            f"<tr><td>{member.index}</td><td>{esc(member.state)}</td>"
            f"<td>{detail}</td></tr>"
        )
    head = "<tr><th>member</th><th>outcome</th><th>result or error</th></tr>"
    return f'<table id="members">{head}{"".join(rows)}</table>'


def _actions(status: GroupStatus, now: datetime, actions: bool, broker: bool) -> str:
    if not actions:
        return ""
    href = group_href(status.group_id)
    field = (
        '<label>token <input type="password" name="token" '
        'autocomplete="off" required></label> '
    )
    parts = []
    if status.state not in (GroupState.COMPLETED, GroupState.CANCELLED):
        parts.append(
            f'<form method="post" action="{href}/cancel">{field}'
            '<button type="submit">Cancel the group</button></form>'
        )
    if status.overdue(now):
        if broker:
            parts.append(
                f'<form method="post" action="{href}/redrive">{field}'
                '<button type="submit">Re-drive its missing members</button></form>'
            )
        else:
            parts.append(
                "<p>Stuck: re-driving kicks tasks, so it needs the page started "
                "with <code>--broker MODULE:VARIABLE</code>.</p>"
            )
    return f"<h2>Actions</h2>{'<br>'.join(parts)}" if parts else ""


def group_page(
    status: GroupStatus,
    now: datetime,
    *,
    items: list[Member],
    failed: tuple[list[Member], int],
    offset: int,
    limit: int,
    actions: tuple[bool, bool],
) -> str:
    """A group: live progress, its failures, a page of its members, actions."""
    doc = progress_doc(status)
    stuck = ' <span class="stuck">stuck</span>' if status.overdue(now) else ""
    counts = ", ".join(
        f'{name} <span id="n-{name}">{value}</span>'
        for name, value in (
            ("done", doc.done),
            ("failed", doc.failed),
            ("skipped", doc.skipped),
            ("lost", doc.lost),
        )
    )
    body = [
        f'<p><progress id="bar" max="{max(doc.total, 1)}" value="{doc.ended}">'
        f'</progress> <span id="count">{doc.ended}/{doc.total}</span> '
        f'(<span id="percent">{doc.percent}%</span>)</p>',
        f"<p>{counts}</p>",
        f'<p>State <span id="state">{esc(doc.state)}</span>{stuck}; created '
        f"{when(status.created)}, deadline {when(status.deadline)}, finished "
        f"{when(status.finished)}, age {duration(status.age_seconds(now))}.</p>",
        _actions(status, now, *actions),
    ]
    found, cursor = failed
    href = group_href(status.group_id)
    rows = "".join(
        f"<tr><td>{m.index}</td><td>{esc(error_text(m.error))}</td></tr>" for m in found
    )
    more = (
        f'<p><a href="{href}?failures={cursor}">more failures &rarr;</a></p>'
        if cursor
        else ""
    )
    body.append(
        f"<h2>Failures ({status.failed})</h2>"
        f'<table id="failures"><tr><th>member</th><th>error</th></tr>{rows}</table>'
        f"{more}"
    )
    last = min(offset + limit, status.total)
    body.append(
        f"<h2>Members {offset}-{max(last - 1, offset)} of {status.total}</h2>"
        + _members_table(items)
        + pager(href, offset, limit, status.total, "offset")
    )
    if status.state in (GroupState.COMPLETED, GroupState.CANCELLED):
        body.append(
            "<p class=muted>Over: outcomes are kept only until the group ends.</p>"
        )
    return page(f"Group {status.group_id}", "".join(body), GROUP_SCRIPT)
