"""The todo guard in the daemon loop, over fakes and a row-written OpenCode DB."""

from __future__ import annotations

from daemon_fakes import Harness

START_TEXT = "I've written the plan. I'll start with the first one."


def write_todos(h: Harness, sid: str, *statuses: str) -> None:
    names = ["Write the parser", "Add the tests", "Update the docs"]
    h.rows.conn.execute("DELETE FROM todo WHERE session_id = ?", (sid,))
    for position, status in enumerate(statuses):
        h.rows.conn.execute(
            "INSERT INTO todo VALUES (?, ?, ?, 'medium', ?, ?, ?)",
            (sid, names[position], status, position, h.rows.clock, h.rows.clock),
        )
    h.rows.commit()


def healthy_end(h: Harness, sid: str, parent: str, text: str = START_TEXT, agent="build") -> str:
    h.status(sid, "busy")
    mid = h.rows.assistant(sid, parent, text=text)
    h.rows.conn.execute(
        "UPDATE message SET data = json_set(data, '$.agent', ?) WHERE id = ?", (agent, mid))
    h.rows.commit()
    h.idle(sid)
    return mid


def started(tmp_path, **todos) -> tuple[Harness, str, str]:
    h = Harness(tmp_path, todos={"enabled": True, **todos})  # off by default
    h.hello()
    sid = h.session()
    user = h.user(sid, "Build the parser and its tests")
    h.chat(sid, user)
    return h, sid, user


def continue_once(h: Harness, sid: str) -> str:
    """The pending continuation goes out after the countdown and OpenCode stores it."""
    h.advance(5.1)
    prompt = h.prompts()[-1]
    injected = h.injected_row(sid, prompt)
    h.chat(sid, injected, prompt.text, marker=dict(prompt.marker))
    return injected


def test_todos_left_after_a_reply_that_carries_on_are_continued_after_the_countdown(tmp_path):
    h, sid, user = started(tmp_path)
    write_todos(h, sid, "in_progress", "pending")
    healthy_end(h, sid, user)

    [decision] = h.store.decisions(sid)
    assert decision.action == "inject_at" and decision.kind == "unfinished_todos"
    assert h.toasts() == [
        "autoretry: 2 todos left — continuing in 5 s; write anything to stop. Will send: the "
        "open todos (next: “Write the parser”), asking to go on unless the last reply asked "
        "you something"]
    h.advance(4.9)
    assert h.prompts() == []
    h.advance(0.2)
    [prompt] = h.prompts()
    assert "Write the parser" in prompt.text and "Add the tests" in prompt.text
    assert "restate that question in one line and stop" in prompt.text
    assert prompt.marker["kind"] == "unfinished_todos"

    injected = h.injected_row(sid, prompt)
    h.chat(sid, injected, prompt.text, marker=dict(prompt.marker))
    write_todos(h, sid, "completed", "completed")
    healthy_end(h, sid, user, "Both are implemented and tested.")
    h.advance(30)
    assert len(h.prompts()) == 1
    last = h.store.decisions(sid)[-1]
    assert last.action == "skip" and "no unfinished todos left after 1" in last.reason


def test_a_healthy_turn_without_todos_records_nothing(tmp_path):
    h, sid, user = started(tmp_path)
    healthy_end(h, sid, user)
    h.advance(30)
    assert h.store.decisions(sid) == [] and h.prompts() == [] and h.toasts() == []


def test_a_question_is_never_continued(tmp_path):
    h, sid, user = started(tmp_path)
    write_todos(h, sid, "pending", "pending")
    healthy_end(h, sid, user, "Should I use SQLite or Postgres for the store?")
    h.idle(sid)  # duplicated idles add no record
    h.advance(60)
    [decision] = h.store.decisions(sid)
    assert decision.action == "skip" and "the reply asks" in decision.reason
    assert h.prompts() == [] and h.toasts() == []


def test_a_user_message_during_the_countdown_cancels_it(tmp_path):
    h, sid, user = started(tmp_path)
    write_todos(h, sid, "pending", "pending")
    healthy_end(h, sid, user)
    h.advance(2)
    second = h.user(sid, "Wait, use Postgres")
    h.chat(sid, second)
    h.advance(10)
    assert h.prompts() == []
    [injection] = h.store.injections(sid)
    assert injection.state == "cancelled"


def test_the_session_turning_busy_cancels_the_countdown(tmp_path):
    h, sid, user = started(tmp_path)
    write_todos(h, sid, "pending")
    healthy_end(h, sid, user)
    h.status(sid, "busy")
    h.advance(10)
    assert h.prompts() == [] and h.store.injections(sid)[0].state == "cancelled"


def test_off_here_cancels_the_countdown_and_blocks_the_next(tmp_path):
    h, sid, user = started(tmp_path)
    write_todos(h, sid, "pending")
    healthy_end(h, sid, user)
    h.command(sid, "off here")
    h.advance(10)
    assert h.prompts() == []
    other = h.user(sid, "go on")
    h.chat(sid, other)
    healthy_end(h, sid, other)
    assert h.store.decisions(sid)[-1].reason == "skip: autoretry is off"


def test_stagnation_stops_after_two_continuations_that_changed_nothing(tmp_path):
    h, sid, user = started(tmp_path)
    write_todos(h, sid, "pending", "pending")
    healthy_end(h, sid, user)
    for reply in ("Working on it. Next I'll write the parser.", "Next I'll write the parser."):
        continue_once(h, sid)
        healthy_end(h, sid, user, reply)
    h.advance(30)
    assert len(h.prompts()) == 2
    actions = [d.action for d in h.store.decisions(sid)]
    assert actions == ["inject_at", "inject_at", "notify"]
    assert "changed no todo (1 in a row)" in h.store.decisions(sid)[1].reason
    assert any("changed none of them" in t for t in h.toasts())


def test_the_budget_caps_continuations_that_make_progress(tmp_path):
    h, sid, user = started(tmp_path, max_continuations=1)
    write_todos(h, sid, "pending", "pending", "pending")
    healthy_end(h, sid, user)
    continue_once(h, sid)
    write_todos(h, sid, "completed", "pending", "pending")
    healthy_end(h, sid, user, "Parser done. Next I'll add the tests.")
    h.advance(30)
    assert len(h.prompts()) == 1
    assert h.store.decisions(sid)[-1].action == "notify"
    assert "continued 1 times for unfinished todos" in h.toasts()[-1]


def test_plan_agent_child_sessions_and_disabled_config_are_left_alone(tmp_path):
    h, sid, user = started(tmp_path)
    write_todos(h, sid, "pending")
    healthy_end(h, sid, user, agent="plan")
    assert "skip_agents" in h.store.decisions(sid)[0].reason

    child = h.session(parent_id=sid)
    cuser = h.user(child)
    h.chat(child, cuser)
    write_todos(h, child, "pending")
    healthy_end(h, child, cuser)
    assert "child session" in h.store.decisions(child)[0].reason

    (tmp_path / "off").mkdir()
    off, osid, ouser = started(tmp_path / "off", enabled=False)
    write_todos(off, osid, "pending")
    healthy_end(off, osid, ouser)
    assert off.store.decisions(osid) == []
    assert h.prompts() == [] and off.prompts() == []


def test_the_todo_continuation_is_off_by_default(tmp_path):
    """Off until a fresh set scored at first sight has no stop reply continued (issue 19): a
    config without ``[todos] enabled = true`` never continues; the same turn with it does."""
    for enabled, wanted in ((None, 0), (True, 1)):
        folder = tmp_path / str(enabled)
        folder.mkdir()
        h = Harness(folder, todos={} if enabled is None else {"enabled": enabled})
        h.hello()
        sid = h.session()
        user = h.user(sid, "Build the parser and its tests")
        h.chat(sid, user)
        write_todos(h, sid, "pending")
        healthy_end(h, sid, user)
        assert len(h.store.decisions(sid)) == wanted, enabled


def test_a_rejected_permission_in_the_turn_blocks_the_continuation(tmp_path):
    h, sid, user = started(tmp_path)
    write_todos(h, sid, "pending")
    h.event("permission.replied", sessionID=sid, requestID="per_1", reply="reject")
    healthy_end(h, sid, user)
    [decision] = h.store.decisions(sid)
    assert decision.action == "skip" and "permission was rejected" in decision.reason


def test_a_late_user_abort_cancels_the_countdown_and_blocks_the_turn(tmp_path):
    """The abort's event arrives after the healthy end was judged (issue 19)."""
    h, sid, user = started(tmp_path)
    write_todos(h, sid, "pending", "pending")
    healthy_end(h, sid, user)
    assert h.store.injections(sid)[0].state == "intent"
    h.event("session.error", sessionID=sid,
            error={"name": "MessageAbortedError", "data": {"message": "Aborted"}})
    h.advance(10)
    assert h.prompts() == []
    [injection] = h.store.injections(sid)
    assert injection.state == "cancelled" and "aborted" in (injection.error or "")
    healthy_end(h, sid, user, text="Next I'll write the parser.")  # a later reply, same turn
    h.advance(10)
    assert h.prompts() == [] and len(h.store.injections(sid)) == 1
    assert "aborted this turn" in h.store.decisions(sid)[-1].reason


def test_no_continuation_right_after_a_compaction_event(tmp_path):
    h, sid, user = started(tmp_path)
    write_todos(h, sid, "pending", "pending")
    h.event("session.compacted", sessionID=sid)
    healthy_end(h, sid, user)
    h.advance(10)
    assert h.prompts() == [] and h.store.injections(sid) == []
    assert "compacted" in h.store.decisions(sid)[-1].reason
