"""Todo continuations in the reports: the todos named and the progress of the next reply."""

from __future__ import annotations

from datetime import timedelta

from opencode_rows import OpenCodeRows, assistant_data, step_finish, tokens

from opencode_autoretry.causes import Cause, Facts
from opencode_autoretry.diagnostics.records import load_records
from opencode_autoretry.diagnostics.render import Style
from opencode_autoretry.diagnostics.todo_view import todo_continuations, todo_lines
from opencode_autoretry.models import Action, BudgetGroup, Decision, Kind, from_epoch_ms
from opencode_autoretry.opencode.db import OpenCodeDB
from opencode_autoretry.store.database import Store

TEXT = "Your todo list still has 2 unfinished item(s):\n- [pending] A\n- [pending] B\nCarry on."


def todowrite(*statuses: str) -> dict:
    pairs = zip("AB", statuses, strict=True)
    todos = [{"content": c, "status": s, "priority": "medium"} for c, s in pairs]
    return {"type": "tool", "tool": "todowrite", "callID": "call_t",
            "state": {"status": "completed", "input": {"todos": todos},
                      "metadata": {"todos": todos}, "title": "2 todos", "output": "[]"}}


def reply(rows: OpenCodeRows, sid: str, parent: str, *parts: dict) -> str:
    ms = rows.tick()
    data = assistant_data(parent, ms, finish="stop", toks=tokens(), error=None, completed_ms=ms)
    return rows.message(sid, data, [*parts, {"type": "text", "text": "ok"},
                                    step_finish("stop", tokens())])


def scenario(tmp_path, after: tuple[str, ...] | None):
    rows = OpenCodeRows(tmp_path / "opencode.db")
    sid = rows.session("swift-planet")
    user = rows.user(sid, "Build A and B")
    reply(rows, sid, user, todowrite("pending", "pending"))
    store = Store.open(tmp_path / "store.db")
    at = from_epoch_ms(rows.clock)
    assert at is not None
    decision = Decision(Action.INJECT_AT, Cause.RETRY, sid, user,
                        Kind.UNFINISHED_TODOS, BudgetGroup.TODOS,
                        facts=Facts(note="inject_at: unfinished_todos"))
    did = store.record_decision(decision, at)
    iid = store.record_intent(did, sid, user, TEXT, at + timedelta(seconds=5), at)
    store.mark_sent(iid, at)
    injected = rows.injected(sid, decision=did, kind="unfinished_todos", injection=iid, text=TEXT)
    store.mark_confirmed(iid, at, injected)
    if after is not None:
        reply(rows, sid, user, *([todowrite(*after)] if after else []))
    rows.commit()
    store.close()
    records = load_records(tmp_path / "store.db")
    return todo_continuations(OpenCodeDB.open(tmp_path / "opencode.db"), records, sid)


def test_a_reply_that_moved_todos_is_progress(tmp_path):
    [item] = scenario(tmp_path, ("completed", "in_progress"))
    assert item.named == ("[pending] A", "[pending] B")
    assert item.status == "progress" and item.detail == "✓ progress: 2 todo(s) changed"
    text = "\n".join(todo_lines([item], Style()))
    assert "Todo continuations: 1" in text and "named: [pending] A; [pending] B" in text


def test_a_reply_without_todowrite_or_with_the_same_list_is_no_progress(tmp_path):
    [item] = scenario(tmp_path, ())
    assert item.status == "no_progress"
    (tmp_path / "b").mkdir()
    [same] = scenario(tmp_path / "b", ("pending", "pending"))
    assert same.status == "no_progress"


def test_no_reply_yet_is_pending(tmp_path):
    [item] = scenario(tmp_path, None)
    assert item.status == "pending"
