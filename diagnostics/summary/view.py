"""The summary drawn: headline lines, a per-day bar chart and two breakdown tables, and the
same figures as ``--json``'s ``summary``.

The chart and the tables are what ``rich`` drew before, character for character:
``drawing`` now writes them without importing rich (a fifth of a ``diagnose``), and rich
still draws them where ``drawing`` cannot be sure to match it (a table wider than the
terminal, a model name that is not printable ASCII). Without colour (``NO_COLOR``, or output
that is not a terminal) the chart and the tables use plain ASCII characters: ``#`` for failed
steps, ``+`` for recovered ones.

``--json`` (added to ``diagnose`` in issue 12)::

    "summary": {"failed": {"steps": int, "turns": int, "sessions": int},
      "turns": {"recovered", "gave_up", "left_alone", "not_recovered", "in_progress",
                "unattended": int},             # each failed turn once, by its newest failure
      "recovered_share": float|null,            # recovered / failed turns
      "left_alone": {"switched_off", "user_abort", "waiting", "child", "no_owner",
                     "not_retryable", "other": int},
      "ownerless_sessions": [session_id],       # the sessions of left_alone.no_owner
      "loops": {"reminded"|"replanned"|"stopped"|"skipped": int},
      "continuations": {"sent": int, "by_outcome": {"<status>": int},
                        "success_rate": float|null},  # recovered / (recovered+failed+blank)
      "decisions": {"count": int, "by_action": {"<action>": {"<kind>": int}}},
      "per_day": [{"day": "YYYY-MM-DD", "failed": int, "recovered": int}],  # local days
      "by_model": [{"model": "provider/model", "failed", "recovered": int}],  # most failed first
      "by_kind": [{"kind", "failed", "recovered", "continuations", "decisions": int}],
      # added in issue 23: observe mode's would-be actions (recorded, never carried out)
      "observed": {"count": int, "by_action": {"<action>": {"<kind>": int}}}}
"""

from __future__ import annotations

import io
import shutil
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from opencode_autoretry.diagnostics.render import Style
from opencode_autoretry.diagnostics.summary.drawing import BAR, Cell, Column, Grid, draw
from opencode_autoretry.diagnostics.summary.tally import DayCount, Summary, Tally
from opencode_autoretry.terminal_text import visible

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

#: The chart's longest bar, in characters, and the most days it draws (``--json`` has all).
BAR_WIDTH = 30
CHART_DAYS = 31
PLAIN_WIDTH = 100
LEFT_ALONE_LABELS = {
    "not_retryable": "not retryable",
    "user_abort": "user aborts",
    "child": "children",
    "switched_off": "switched off",
    "no_owner": "no live owner",
    "waiting": "waiting on you or a subagent",
    "other": "other",
}


def _tally_json(name: str, key: str, tally: Tally, store: bool) -> dict[str, Any]:
    found: dict[str, Any] = {key: name, "failed": tally.failed, "recovered": tally.recovered}
    if store:
        found.update(continuations=tally.continuations, decisions=tally.decisions)
    return found


def summary_json(summary: Summary) -> dict[str, Any]:
    return {
        "failed": {
            "steps": summary.failed_steps,
            "turns": summary.failed_turns,
            "sessions": summary.failed_sessions,
        },
        "turns": dict(summary.turns),
        "recovered_share": summary.recovered_share,
        "left_alone": dict(summary.left_alone),
        "ownerless_sessions": list(summary.ownerless_sessions),  # added in issue 24
        "loops": dict(sorted(summary.loops.items())),
        "continuations": {
            "sent": summary.continuations_sent,
            "by_outcome": dict(sorted(summary.continuations.items())),
            "success_rate": summary.success_rate,
        },
        "decisions": {
            "count": sum(sum(k.values()) for k in summary.decisions.values()),
            "by_action": {a: dict(k) for a, k in summary.decisions.items()},
        },
        "per_day": [
            {"day": d.day.isoformat(), "failed": d.failed, "recovered": d.recovered}
            for d in summary.per_day
        ],
        "by_model": [_tally_json(m, "model", t, False) for m, t in summary.by_model.items()],
        "by_kind": [_tally_json(k, "kind", t, True) for k, t in summary.by_kind.items()],
        "observed": {
            "count": sum(sum(k.values()) for k in summary.observed.values()),
            "by_action": {a: dict(k) for a, k in summary.observed.items()},
        },
    }


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f} %"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def headline_lines(summary: Summary, style: Style) -> list[str]:
    """Colours say what a count means (issue 24): green only for some good, red only for
    some bad, yellow for what waits on someone; a zero is never painted as a success."""
    turns = summary.turns
    alone = ", ".join(
        f"{LEFT_ALONE_LABELS.get(k, k)} {v}" for k, v in summary.left_alone.items() if v
    )
    loops = summary.loops
    outcomes = ", ".join(f"{k} {v}" for k, v in sorted(summary.continuations.items()))
    recovered = f"{_plural(turns['recovered'], 'turn')} ({_share(summary.recovered_share)})"
    failed = f"{_plural(summary.failed_steps, 'step')}"
    settled_ok = summary.continuations.get("recovered", 0)
    success = f"success {_share(summary.success_rate)}"
    return [
        style.head("What autoretry did"),
        f"  Failed:         {style.lost(failed, summary.failed_steps)} in "
        f"{_plural(summary.failed_turns, 'turn')} of {_plural(summary.failed_sessions, 'session')}",
        f"  Recovered:      {style.gained(recovered, turns['recovered'], summary.failed_turns)}"
        ", continued automatically",
        f"  Gave up:        {style.pending(_plural(turns['gave_up'], 'turn'), turns['gave_up'])}"
        " (budget used up: waiting for you)",
        f"  Left alone:     {_plural(turns['left_alone'], 'turn')} on purpose"
        + (f" ({alone})" if alone else ""),
        f"  Not recovered:  {style.lost(str(turns['not_recovered']), turns['not_recovered'])}"
        f"   in progress: {turns['in_progress']}   "
        f"unattended (no decision on record): "
        f"{style.pending(str(turns['unattended']), turns['unattended'])}",
        f"  Loops stopped:  {loops.get('stopped', 0)} (reminded {loops.get('reminded', 0)}, "
        f"replanned {loops.get('replanned', 0)})",
        f"  Continuations:  {summary.continuations_sent} sent, "
        f"{style.gained(success, settled_ok, summary.continuations_sent)}"
        + (f" ({outcomes})" if outcomes else ""),
        *_observed_lines(summary),
    ]


#: How the summary names an observed decision's action (issue 23).
WOULD_LABELS = {"inject": "would continue", "inject_at": "would continue later",
                "abort_then_inject": "would stop and continue", "notify": "would give up",
                "abort": "would abort a subagent"}


def _observed_lines(summary: Summary) -> list[str]:
    """Observe mode's would-be actions, when there are any: none of them was carried out."""
    counts = {a: sum(k.values()) for a, k in summary.observed.items()}
    if not counts:
        return []
    parts = ", ".join(f"{WOULD_LABELS.get(a, 'would ' + a)} {n}" for a, n in counts.items())
    return [f"  Observe mode:   {_plural(sum(counts.values()), 'would-be action')} "
            f"({parts}); nothing was sent, aborted or switched"]


def console_width(style: Style) -> int:
    """The width the chart and the tables are drawn in: the terminal's with colour."""
    return shutil.get_terminal_size((PLAIN_WIDTH, 24)).columns if style.colour else PLAIN_WIDTH


def _console(style: Style, width: int) -> Console:
    from rich.console import Console

    return Console(
        file=io.StringIO(),
        width=width,
        color_system="standard" if style.colour else None,
        force_terminal=style.colour,
        no_color=not style.colour,
        highlight=False,
        emoji=False,
        markup=False,
    )


def _rich_table(grid: Grid, style: Style) -> Table:
    """``grid`` as the rich table it was before ``drawing``: what the summary
    falls back to where ``drawing`` cannot be sure to draw what rich draws."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    if grid.framed:
        table = Table(box=box.SIMPLE_HEAD if style.colour else box.ASCII2)
    else:
        table = Table(box=None, show_header=False, pad_edge=False, padding=(0, 1))
    for column in grid.columns:
        table.add_column(column.header, justify=column.justify, no_wrap=column.no_wrap,
                         min_width=column.min_width)
    for row in grid.rows:
        table.add_row(*(Text(c.text, style=c.colour) if c.colour else c.text for c in row))
    return table


def draw_with_rich(grids: Sequence[Grid], style: Style, width: int) -> str:
    """What rich's console writes printing ``grids``, one after the other."""
    console = _console(style, width)
    for grid in grids:
        console.print(_rich_table(grid, style))
    return console.file.getvalue()  # type: ignore[attr-defined,no-any-return]


def _bar(count: int, peak: int, glyph: str) -> str:
    if count <= 0 or peak <= 0:
        return ""
    return glyph * max(1, round(count * BAR_WIDTH / peak))


def _chart(days: tuple[DayCount, ...], style: Style) -> Grid:
    full, ok = (BAR, BAR) if style.colour else ("#", "+")
    red, green = ("red", "green") if style.colour else ("", "")
    shown = days[-CHART_DAYS:]
    peak = max((d.failed for d in shown), default=0)
    columns = (Column("day"), Column("failed", justify="right"),
               Column("failed bar", no_wrap=True, min_width=BAR_WIDTH),
               Column("recovered", justify="right"), Column("recovered bar", no_wrap=True))
    rows = tuple(
        (Cell(day.day.strftime("%a %Y-%m-%d")), Cell(str(day.failed)),
         Cell(_bar(day.failed, peak, full), red), Cell(str(day.recovered)),
         Cell(_bar(day.recovered, peak, ok), green))
        for day in shown
    )
    return Grid(columns, rows, framed=False)


def _breakdown(title: str, rows: Mapping[str, Tally], store: bool) -> Grid:
    """Failed and recovered steps per row; with ``store``, also what the daemon recorded."""
    extra = ("continuations", "decisions") if store else ()
    columns = (Column(title), *(Column(name, justify="right")
                                for name in ("failed", "recovered", "share", *extra)))
    cells = []
    for name, tally in rows.items():
        share = _share(tally.recovered / tally.failed if tally.failed else None)
        counts = (tally.continuations, tally.decisions) if store else ()
        cells.append(tuple(map(Cell, (visible(name), str(tally.failed), str(tally.recovered),
                                      share, *map(str, counts)))))
    return Grid(columns, tuple(cells), framed=True)


def summary_grids(summary: Summary, style: Style) -> list[Grid]:
    """The chart, then the breakdowns per model and per kind (those that have rows)."""
    grids = [_chart(summary.per_day, style)]
    if summary.by_model:
        grids.append(_breakdown("provider/model", summary.by_model, store=False))
    if summary.by_kind:
        grids.append(_breakdown("kind", summary.by_kind, store=True))
    return grids


def render_summary(summary: Summary, style: Style, width: int | None = None) -> str:
    """The headline (painted by ``Style``), then the chart and the tables, drawn by
    ``drawing`` as rich would draw them, or by rich where ``drawing`` cannot be sure to.
    ``width``: the console's (by default the terminal's with colour, else PLAIN_WIDTH)."""
    days = summary.per_day
    hidden = len(days) - CHART_DAYS
    glyphs = ("█ red", "█ green") if style.colour else ("#", "+")
    legend = f"Per day: failed steps ({glyphs[0]}) and recovered ({glyphs[1]})"
    if hidden > 0:
        legend += f", last {CHART_DAYS} days ({hidden} earlier in --json)"
    width = console_width(style) if width is None else width
    grids = summary_grids(summary, style)
    written = draw(grids, style.colour, width)
    if written is None:
        written = draw_with_rich(grids, style, width)
    drawn = written.rstrip("\n").splitlines()
    return "\n".join([*headline_lines(summary, style), legend, *(x.rstrip() for x in drawn)])
