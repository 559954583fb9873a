"""``autoretry timeline SESSION --html FILE`` (issue 12): one self-contained page, checked as
text here and in a real browser (headless Chromium) when one is installed."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from browser import check_page, find_chromium

from opencode_autoretry.causes import Cause, Facts
from opencode_autoretry.diagnostics.timeline.page import GAP_CAP, Axis


def write_page(invoke, session: str, target: Path) -> str:
    result = invoke("timeline", session, "--html", str(target))
    assert result.exit_code == 0, result.output
    assert f"wrote {target}" in result.output  # on stderr (CliRunner mixes them)
    return target.read_text(encoding="utf-8")


def kinds(page: str) -> set[str]:
    return set(re.findall(r'data-kind="([^"]+)"', page))


def test_page_is_self_contained(invoke, seeded, tmp_path: Path) -> None:
    page = write_page(invoke, seeded.sessions["main"], tmp_path / "main.html")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<script" not in page and "<link" not in page and "<img" not in page
    assert not re.search(r"(https?:)?//[a-z0-9]", page.replace("</", ""), re.I)
    assert not re.search(r'\b(src|href)="(?!#)', page)  # links only to its own rows
    assert "url(" not in page and "@import" not in page


def test_page_marks_what_happened(invoke, seeded, tmp_path: Path) -> None:
    page = write_page(invoke, seeded.sessions["main"], tmp_path / "main.html")
    # the blank was continued and recovered; the reset (retried by OpenCode) was continued,
    # the reply hit a 429 and the budget ran out: a notice
    assert {"user-real", "user-injected", "ok", "fault", "abort", "oc-retry"} <= kinds(page)
    assert {"inject", "recovered", "failed", "notify"} <= kinds(page)
    assert page.count('class="mark ') == page.count("<tr id=")
    assert "continuation #1: recovered" in page and "✓ recovered (output=42)" in page
    assert "rate_limit budget exhausted (2/2)" in page
    assert "swift-planet" in page and "Times are local (UTC +0000)" in page


def test_waits_and_loop_stops_are_drawn(fresh_seeded, run_on, tmp_path: Path) -> None:
    from opencode_autoretry.models import Action, BudgetGroup, Decision, Kind
    from opencode_autoretry.store.database import Store

    store = Store.open(fresh_seeded.store)
    sid, turn = fresh_seeded.sessions["net"], fresh_seeded.users["net"]
    at = datetime(2026, 11, 30, 12, 10, tzinfo=UTC)
    wait = Decision(
        Action.INJECT_AT, Cause.RETRY, sid, turn, Kind.TIMEOUT, BudgetGroup.TIMEOUT,
        "Continue.", at + timedelta(seconds=5), 0, 1, 2, facts=Facts(note="inject_at: timeout"),
    )
    store.record_decision(wait, at, message_id=fresh_seeded.steps["timeout"])
    stop = Decision(Action.NOTIFY, Cause.BUDGET_SPENT, sid, turn, Kind.REPETITION,
                    facts=Facts(note="notify: repetition"))
    store.record_decision(stop, at + timedelta(seconds=9))
    store.record_decision(Decision("hold_subagent", Cause.OTHER, sid, turn, "hung",  # type: ignore[arg-type]
                                   facts=Facts(note="a new action")), at)
    store.close()
    target = tmp_path / "net.html"
    result = run_on(fresh_seeded.db, fresh_seeded.store, "timeline", sid, "--html", str(target))
    assert result.exit_code == 0, result.output
    page = target.read_text()
    assert {"wait", "inject", "loop", "other"} <= kinds(page)
    assert "waits 5 s" in page and "hold_subagent hung" in page


def test_dash_writes_to_stdout_and_json_excludes_html(invoke, seeded) -> None:
    out = invoke("timeline", seeded.sessions["quiet"], "--html", "-")
    assert out.exit_code == 0 and out.output.startswith("<!DOCTYPE html>")
    both = invoke("timeline", seeded.sessions["quiet"], "--html", "-", "--json")
    assert both.exit_code == 2 and "exclusive" in both.output


def test_unwritable_file_is_one_line_and_exit_2(invoke, seeded, tmp_path: Path) -> None:
    result = invoke("timeline", seeded.sessions["quiet"], "--html", str(tmp_path / "no" / "x.html"))
    assert result.exit_code == 2 and "cannot write" in result.output


def test_long_gaps_are_shortened_on_the_axis() -> None:
    start = datetime(2026, 11, 30, tzinfo=UTC)
    times = [start, start + timedelta(seconds=10), start + timedelta(hours=5)]
    axis = Axis.over(times, events=3)
    assert axis.span == 10 + GAP_CAP.total_seconds()
    assert axis.breaks == ((times[2], timedelta(hours=5) - timedelta(seconds=10)),)
    assert 0 == axis.x(times[0]) < axis.x(times[1]) < axis.x(times[2]) <= axis.width


chromium = pytest.mark.skipif(
    find_chromium() is None, reason="chromium is not installed (apt-get install chromium)"
)


@chromium
def test_page_renders_in_chromium_without_console_errors(invoke, seeded, tmp_path: Path) -> None:
    target = tmp_path / "main.html"
    page = write_page(invoke, seeded.sessions["main"], target)
    found = check_page(target)
    assert found.done, found
    assert found.console == ()
    assert found.marks == found.drawn == found.tips == page.count('class="mark ') > 0
    assert {"fault", "recovered", "notify", "user-injected", "oc-retry"} <= found.kinds
    assert found.lanes == 5 and found.rows == found.marks
    assert "swift-planet" in found.text


@chromium
def test_the_browser_check_sees_console_errors(tmp_path: Path) -> None:
    """The negative control: a page with a script error is caught."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><p>x</p><script>missingFunction();</script>")
    found = check_page(bad)
    assert found.done and found.marks == 0
    assert any("missingFunction" in line for line in found.console), found.console


def test_the_page_forbids_everything_but_its_inline_css(invoke, seeded, tmp_path: Path) -> None:
    # Issue 20: with no policy, markup slipping past the escaping could load or run anything.
    target = tmp_path / "csp.html"
    assert invoke("timeline", seeded.sessions["main"], "--html", str(target)).exit_code == 0
    page = target.read_text()
    policy = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', page)
    assert policy is not None and page.index(policy[0]) < page.index("<style>")
    rules = dict(rule.strip().split(" ", 1) for rule in policy[1].split(";"))
    assert rules["default-src"] == "'none'" and rules["style-src"] == "'unsafe-inline'"


# -- issue 24: a page a user can follow --------------------------------------------------------


def _extra_session(seeded, build) -> str:
    """A session of the test's own, added to the fresh seeded DB."""
    from opencode_rows import BASE_MS

    rows = seeded.rows
    rows.clock = BASE_MS + 3_600_000
    sid = build(rows)
    rows.commit()
    return sid


def test_finished_tool_call_steps_are_not_running(fresh_seeded, run_on, tmp_path: Path) -> None:
    def build(rows) -> str:
        sid = rows.session("tool-runner")
        turn = rows.user(sid)
        rows.assistant(sid, turn, finish="tool-calls", tools=[("bash", "completed")], text=None)
        rows.assistant(sid, turn, finish="tool-calls", tools=[("bash", "completed")], text=None)
        rows.assistant(sid, turn)
        return sid

    sid = _extra_session(fresh_seeded, build)
    page = write_page(lambda *a: run_on(fresh_seeded.db, fresh_seeded.store, *a), sid,
                      tmp_path / "t.html")
    assert "running" not in kinds(page) and "step still running" not in page
    assert page.count('data-kind="tools"') == 2 and "step ended in tool calls" in page


def test_identical_steps_in_a_row_fold_into_one_counted_mark(
    fresh_seeded, run_on, tmp_path: Path
) -> None:
    from opencode_rows import tokens

    def build(rows) -> str:
        sid = rows.session("runaway-39")
        turn = rows.user(sid)
        for _ in range(39):
            rows.assistant(sid, turn, finish="unknown", toks=tokens(0, 0), text="")
        return sid

    sid = _extra_session(fresh_seeded, build)
    page = write_page(lambda *a: run_on(fresh_seeded.db, fresh_seeded.store, *a), sid,
                      tmp_path / "r.html")
    steps = re.findall(r'class="mark m-(?:ok|fault|running|tools)"[^>]*>([^<]*)', page)
    assert 1 <= len(steps) <= 4, steps  # not 39 marks
    counts = [int(n) for label in steps for n in re.findall(r"×(\d+)", label)]
    assert counts and sum(counts) + len(steps) - len(counts) == 39, steps
    assert "identical steps in a row" in page


def test_the_page_opens_with_a_one_line_verdict(invoke, seeded, tmp_path: Path) -> None:
    page = write_page(invoke, seeded.sessions["main"], tmp_path / "v.html")
    # faults: blank and reset (continued), 429, length, think-only, tool-as-text (left)
    verdict = re.search(r'<div class="verdict">([^<]*)</div>', page)
    assert verdict is not None and page.index(verdict[0]) < page.index('id="axis"')
    assert verdict[1] == "6 faults: 2 continued by autoretry, 4 left to you"


def test_an_empty_decision_lane_says_why(invoke, seeded, tmp_path: Path) -> None:
    page = write_page(invoke, seeded.sessions["loop"], tmp_path / "e.html")
    lane = page[page.index('data-lane="autoretry"'):]
    lane = lane[: lane.index('<div class="lane"')]
    assert "no daemon decisions on record for this session" in lane
    busy = write_page(invoke, seeded.sessions["main"], tmp_path / "m.html")
    assert "no daemon decisions on record" not in busy


def test_a_task_step_names_its_child_and_how_to_open_it(
    fresh_seeded, run_on, tmp_path: Path
) -> None:
    child = fresh_seeded.sessions["child"]

    def build(rows) -> str:
        sid = rows.session("task-parent")
        rows.assistant(sid, rows.user(sid), finish="tool-calls", tools=[("task", "completed")])
        rows.conn.execute(
            "UPDATE part SET data = json_set(data, '$.state.metadata.sessionId', ?) "
            "WHERE session_id = ? AND json_extract(data, '$.tool') = 'task'",
            (child, sid),
        )
        return sid

    sid = _extra_session(fresh_seeded, build)
    page = write_page(lambda *a: run_on(fresh_seeded.db, fresh_seeded.store, *a), sid,
                      tmp_path / "k.html")
    assert f"child session {child}: autoretry timeline {child}" in page


def test_the_axis_is_sized_by_css_not_pixels(invoke, seeded, tmp_path: Path) -> None:
    page = write_page(invoke, seeded.sessions["main"], tmp_path / "w.html")
    axis_rule = re.search(r"\.axis\{[^}]*\}", page)
    assert axis_rule is not None and not re.search(r"\bwidth:\d+px", axis_rule[0])
    assert re.findall(r'class="mark [^"]*"[^>]*style="left:[\d.]+%;width:[\d.]+%"', page)


@chromium
def test_the_page_fits_a_narrow_window_and_fills_a_wide_one(
    invoke, seeded, tmp_path: Path
) -> None:
    target = tmp_path / "main.html"
    write_page(invoke, seeded.sessions["main"], target)
    wide, narrow = check_page(target, width=1400), check_page(target, width=600)
    assert wide.done and narrow.done and wide.console == () == narrow.console
    assert narrow.overflow == 0, narrow  # no horizontal scroll at 600 px
    assert wide.axis >= 0.8 * wide.view, wide  # the axis spans most of a wide window
    assert narrow.drawn == narrow.marks > 0
