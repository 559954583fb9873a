"""The HTML page of ``autoretry timeline SESSION --html FILE``: one self-contained file.

No script, no network, no external asset: inline CSS, marks placed on a time axis, details
on hover (or keyboard focus) and, below, every event in a table that each mark links to.
Long idle gaps are drawn shortened (a dashed break says how long they were), so a session
of days stays readable; times are local, with UTC in each detail.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, tzinfo
from string import Template

from opencode_autoretry.diagnostics.records import DaemonRecords
from opencode_autoretry.diagnostics.render import iso
from opencode_autoretry.diagnostics.steps import classify_rows, relabel_daemon_aborts
from opencode_autoretry.diagnostics.summary.tally import continuation_outcomes
from opencode_autoretry.diagnostics.timeline.marks import (
    LANES,
    LEGEND,
    Mark,
    build_marks,
    verdict_line,
)
from opencode_autoretry.diagnostics.timeline.report import TimelineReport
from opencode_autoretry.models import Message, Role, Session
from opencode_autoretry.opencode.db import OpenCodeDB

#: A gap longer than this is drawn as this long (with a break mark).
GAP_CAP = timedelta(seconds=60)
PX_PER_EVENT = 18
MIN_WIDTH, MAX_WIDTH = 900, 24_000
MARK_MIN_PX = 8

#: The page needs nothing but its own inline CSS (a <style> and style attributes): a title or
#: error that slipped an element past the escaping can load, run or send nothing (issue 20).
CSP = "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'"

PAGE = Template("""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="$csp">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>$title</title>
<style>
body{font:13px/1.4 system-ui,sans-serif;margin:0;padding:16px;color:#1d2330;background:#fbfbfd}
h1{font-size:18px;margin:0 0 4px}.meta{color:#5a6275;margin-bottom:12px}
.verdict{font-size:15px;font-weight:600;margin:4px 0 8px}
.empty{position:absolute;top:9px;left:4px;color:#5a6275;font-style:italic;white-space:nowrap}
.legend{display:flex;flex-wrap:wrap;gap:6px 14px;margin:8px 0 16px;max-width:1100px}
.legend span{display:inline-flex;align-items:center;gap:5px}
.legend i{display:inline-block;width:14px;height:14px;border-radius:3px}
.axis{position:relative;margin-left:150px;margin-right:${markmin}px}
.lane{position:relative;height:34px;border-bottom:1px solid #e3e6ee}
.lane-name{position:sticky;left:0;float:left;margin-left:-150px;width:140px;height:34px;
 line-height:34px;font-weight:600;color:#39404f;background:#fbfbfd;z-index:3}
.mark{position:absolute;top:7px;height:20px;min-width:${markmin}px;border-radius:4px;
 color:#fff;font-size:11px;line-height:20px;text-align:center;text-decoration:none;
 box-shadow:0 0 0 1px rgba(0,0,0,.15);z-index:1}
.mark:hover,.mark:focus{z-index:5;outline:2px solid #1d2330}
.tip{display:none;position:absolute;top:24px;left:0;min-width:260px;max-width:460px;
 padding:6px 8px;border-radius:5px;background:#1d2330;color:#f3f4f8;text-align:left;
 white-space:normal;line-height:1.35;font-size:12px;box-shadow:0 3px 10px rgba(0,0,0,.3)}
.mark:hover .tip,.mark:focus .tip{display:block}
.ticks{position:relative;height:22px;color:#5a6275;font-size:11px}
.tick{position:absolute;top:2px;white-space:nowrap;border-left:1px solid #c5cad6;padding-left:3px}
.gap{position:absolute;top:0;bottom:0;border-left:2px dashed #9aa1b2;z-index:0}
.gap span{position:absolute;top:-18px;left:2px;font-size:10px;color:#5a6275;white-space:nowrap}
table{border-collapse:collapse;margin-top:28px;font-size:12px;width:100%}
td,th{border-bottom:1px solid #e3e6ee;padding:3px 8px;text-align:left;vertical-align:top;
 overflow-wrap:anywhere}
tr:target{background:#fff3c4}
.m-user-real{background:#2c4a8a}.m-user-injected{background:#b0308c}.m-user-synthetic{background:#8a8f9c}
.m-ok{background:#2f9e55}.m-fault{background:#d23b3b}.m-abort{background:#e08a1e}
.m-running{background:#9aa1b2}.m-tools{background:#3d8f6a}.m-oc-retry{background:#7a5cc9}.m-wait{background:#a9cdf2;color:#1d2330}
.m-inject{background:#2878d0}.m-abort-inject{background:#5b3fb0}.m-notify{background:#e0b000;color:#1d2330}
.m-skip{background:#b5bac6;color:#1d2330}.m-loop{background:#e0529c}.m-recovered{background:#17803d}
.m-failed{background:#9c1f1f}.m-pending{background:#c7cbd5;color:#1d2330}.m-other{background:#1b8f8f}
</style></head>
<body>
<h1>$heading</h1>
<div class="verdict">$verdict</div>
<div class="meta">$meta</div>
<div class="legend">$legend</div>
<div class="axis" id="axis">
<div class="ticks">$ticks</div>
$gaps
$lanes
</div>
<table><thead><tr><th>#</th><th>time</th><th>lane</th><th>what</th><th>details</th></tr></thead>
<tbody>
$rows
</tbody></table>
<p class="meta">Written by autoretry on $generated. Times are local ($zone).</p>
</body></html>
""")


@dataclass(frozen=True)
class Axis:
    """Time to pixels, with every gap longer than ``GAP_CAP`` shortened to it."""

    offsets: Mapping[datetime, float]  # seconds on the drawn axis
    span: float
    width: int
    breaks: tuple[tuple[datetime, timedelta], ...]  # (after the gap, how long it was)

    @classmethod
    def over(cls, times: Sequence[datetime], events: int) -> Axis:
        ordered = sorted(set(times))
        offsets: dict[datetime, float] = {}
        total, breaks = 0.0, []
        for before, moment in zip([None, *ordered], ordered, strict=False):
            if before is not None:
                gap = moment - before
                total += min(gap, GAP_CAP).total_seconds()
                if gap > GAP_CAP:
                    breaks.append((moment, gap))
            offsets[moment] = total
        width = max(MIN_WIDTH, min(MAX_WIDTH, events * PX_PER_EVENT))
        return cls(offsets, total, width, tuple(breaks))

    def pct(self, moment: datetime) -> float:
        """Where ``moment`` is drawn, in % of the axis: the axis fills the window (CSS only)."""
        if self.span <= 0:
            return 0.0
        return round(self.offsets[moment] / self.span * 100, 3)

    def x(self, moment: datetime) -> float:
        if self.span <= 0:
            return 0.0
        return round(self.offsets[moment] / self.span * (self.width - MARK_MIN_PX), 1)


def _duration(value: timedelta) -> str:
    seconds = int(value.total_seconds())
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    parts = [f"{days} d" if days else "", f"{hours} h" if hours else "", f"{minutes} min"]
    return " ".join(p for p in parts if p)


def _local(value: datetime, zone: tzinfo | None, with_date: bool = False) -> str:
    return value.astimezone(zone).strftime("%Y-%m-%d %H:%M:%S" if with_date else "%H:%M:%S")


def _mark_html(index: int, mark: Mark, axis: Axis, zone: tzinfo | None) -> str:
    left = axis.pct(mark.start)
    width = axis.pct(mark.end) - left if mark.end is not None and mark.end > mark.start else 0
    when = f"{_local(mark.start, zone, True)} ({iso(mark.start)})"
    lines = "".join(f"<br>{html.escape(line)}" for line in mark.detail if line)
    tip = f"<b>{html.escape(mark.title)}</b><br>{html.escape(when)}{lines}"
    return (
        f'<a class="mark m-{mark.css}" data-kind="{mark.css}" href="#e{index}" '
        f'style="left:{left}%;width:{width:.3f}%" '
        f'aria-label="{html.escape(mark.title)}">{html.escape(mark.label)}'
        f'<span class="tip">{tip}</span></a>'
    )


#: What an empty lane says, so that "nothing" reads as an answer, not a drawing bug.
EMPTY_LANES = {
    "autoretry": "no daemon decisions on record for this session",
    "continuations": "autoretry sent no continuation in this session",
    "opencode": "OpenCode did not retry by itself",
}


def _empty_lane(lane: str) -> str:
    why = EMPTY_LANES.get(lane)
    return f'<span class="empty">{html.escape(why)}</span>' if why else ""


def _row_html(index: int, mark: Mark, zone: tzinfo | None) -> str:
    lane = dict(LANES)[mark.lane]
    details = "<br>".join(html.escape(line) for line in mark.detail if line)
    return (
        f'<tr id="e{index}"><td>{index}</td><td>{_local(mark.start, zone, True)}</td>'
        f"<td>{html.escape(lane)}</td><td>{html.escape(mark.title)}</td><td>{details}</td></tr>"
    )


def _ticks(marks: Sequence[Mark], axis: Axis, zone: tzinfo | None) -> str:
    """A label at each message you sent, and at both ends."""
    moments = [m.start for m in marks if m.css == "user-real"]
    if marks:
        moments += [marks[0].start, marks[-1].start]
    drawn, last = [], -1e9
    for moment in sorted(set(moments)):
        x = axis.pct(moment)
        if x - last >= 12 and x <= 90:  # labels never overlap, even in a narrow window
            drawn.append(f'<span class="tick" style="left:{x}%">{_local(moment, zone)}</span>')
            last = x
    return "".join(drawn)


def render_page(
    session: Session, marks: Sequence[Mark], *, now: datetime, zone: tzinfo | None = None
) -> str:
    times = [t for m in marks for t in (m.start, m.end) if t is not None]
    axis = Axis.over(times, len(marks))
    lanes = []
    for lane, name in LANES:
        inner = "".join(
            _mark_html(i, m, axis, zone) for i, m in enumerate(marks, 1) if m.lane == lane
        ) or _empty_lane(lane)
        lanes.append(
            f'<div class="lane" data-lane="{lane}"><div class="lane-name">'
            f"{html.escape(name)}</div>{inner}</div>"
        )
    gaps = "".join(
        f'<div class="gap" style="left:{axis.pct(at)}%"><span>… {_duration(gap)} …</span></div>'
        for at, gap in axis.breaks
    )
    used = {m.css for m in marks}
    legend = "".join(
        f'<span><i class="m-{css}"></i>{html.escape(text)}</span>'
        for css, text in LEGEND.items()
        if css in used
    )
    child = (
        f" · child session of {session.parent_id} (never continued)" if session.parent_id else ""
    )
    meta = (
        f"{session.id} · {session.slug} · OpenCode {session.version} · created "
        f"{_local(session.time_created, zone, True)} · {len(marks)} marks{child}"
    )
    return PAGE.substitute(
        csp=CSP,
        title=html.escape(f"autoretry timeline — {session.slug}"),
        heading=html.escape(f"{session.title or session.slug}"),
        verdict=html.escape(verdict_line(list(marks))),
        meta=html.escape(meta),
        legend=legend,
        markmin=MARK_MIN_PX,
        ticks=_ticks(marks, axis, zone),
        gaps=gaps,
        lanes="\n".join(lanes),
        rows="\n".join(_row_html(i, m, zone) for i, m in enumerate(marks, 1)),
        generated=html.escape(_local(now, zone, True)),
        zone=html.escape(now.astimezone(zone).strftime("%Z %z")),
    )


def timeline_html(
    db: OpenCodeDB,
    report: TimelineReport,
    records: DaemonRecords,
    *,
    now: datetime,
    zone: tzinfo | None = None,
) -> str:
    """The page for ``report``: every step classified in its turn, every continuation with
    its outcome (``records`` of this session)."""
    steps = [e for e in report.entries if isinstance(e, Message) and e.role is Role.ASSISTANT]
    rows = [row for row in map(db.row, (m.id for m in steps)) if row is not None]
    found = relabel_daemon_aborts(classify_rows(db, rows, now=now, whole_turn=True), records)
    verdicts = {item.step.id: item.verdict for item in found}
    outcomes = continuation_outcomes(db, records.injections_for(report.session.id))
    marks = build_marks(report, verdicts, outcomes)
    return render_page(report.session, marks, now=now, zone=zone)
