"""Restarts, routing and the gate: exactly once, never into children, never without an owner."""

from __future__ import annotations

import json
import logging

from daemon_fakes import PID, Harness, disconnect

from opencode_autoretry.daemon.inbox import DbRows
from opencode_autoretry.opencode.db import OpenCodeDB
from opencode_autoretry.plugin_bridge import protocol


def errored_session(h: Harness) -> str:
    sid, _, _ = h.failed_turn()
    h.error_then_idle(sid, disconnect())
    return sid


def read_message(h: Harness, message_id: str):
    db = OpenCodeDB.open(h.settings.opencode_db)
    try:
        return db.message(message_id)
    finally:
        db.close()


def restart(h: Harness) -> None:
    """A new daemon process: fresh memory, same store and DB (the old one was SIGKILLed)."""
    h.loop.beat(h.clock.now())
    h.bridge.sent.clear()
    h.timers.armed.clear()
    h.loop = h.new_loop()


def test_restart_during_backoff_sends_exactly_once(tmp_path):
    h = Harness(tmp_path)
    h.hello()
    sid = errored_session(h)
    [intent] = h.store.open_injections(sid)
    restart(h)
    assert h.timers.armed == {intent.id: intent.due}  # re-armed from the store
    h.advance(10)
    assert h.prompts() == []  # no owner yet: the bridge has not said hello again
    h.bridge.alive = {"b7"}
    h.hello(conn="b7", pid=PID)  # the same OpenCode process reconnects
    [prompt] = h.prompts()
    assert prompt.marker and prompt.marker["injection"] == str(intent.id)
    assert [conn for conn, m in h.bridge.sent if m is prompt] == ["b7"]
    restart(h)
    h.bridge.alive = {"b8"}
    h.hello(conn="b8", pid=PID)
    h.advance(60)
    assert h.prompts() == []


def test_restart_after_send_never_resends_a_message_that_exists(tmp_path):
    h = Harness(tmp_path)
    h.hello()
    sid = errored_session(h)
    h.advance(6)
    [prompt] = h.prompts()
    h.injected_row(sid, prompt)  # OpenCode wrote it; the daemon died before seeing it
    restart(h)
    h.hello(pid=PID)
    h.advance(120)
    assert h.prompts() == []
    assert h.store.injections(sid)[0].state == "confirmed"


def test_intent_whose_message_exists_is_confirmed_not_sent(tmp_path):
    h = Harness(tmp_path)
    h.hello()
    sid = errored_session(h)
    [intent] = h.store.open_injections(sid)
    marker = {"decision": str(intent.decision_id), "injection": str(intent.id),
              "kind": "disconnect"}
    h.injected_row(sid, protocol.Prompt(id="x", session_id=sid, text="Continue.", marker=marker))
    restart(h)
    h.hello(pid=PID)
    h.advance(10)
    assert h.prompts() == []
    assert h.store.injections(sid)[0].state == "confirmed"


def test_child_session_is_never_injected_d23(tmp_path):
    h = Harness(tmp_path)
    h.hello()
    root = h.session()
    child = h.session(parent_id=root)
    user = h.user(child, "subtask")
    h.status(child, "busy")
    h.failed_step(child, user)
    h.error_then_idle(child, disconnect())
    h.advance(60)
    assert h.prompts() == []
    [decision] = h.store.decisions(child)
    assert decision.action == "skip" and "child session" in decision.reason


def test_root_waits_while_its_child_is_busy_d22(tmp_path):
    h = Harness(tmp_path)
    h.hello()
    root = h.session()
    user = h.user(root)
    h.chat(root, user)
    child = h.session(parent_id=root)
    h.status(child, "busy")
    h.blank_step(root, user)
    h.idle(root)
    assert h.prompts() == []
    h.idle(child)  # no new root event: the child's idle re-judges its waiting root (R2)
    assert len(h.prompts()) == 1


def test_gate_rereads_parent_from_the_db(tmp_path):
    h = Harness(tmp_path)
    h.hello()
    root = h.session()
    # The bridge never said this one is a child, but OpenCode's DB does.
    child = h.rows.session("lucky-sailor", parent_id=root)
    h.rows.commit()
    owner, why = h.loop.actions.gate(child)
    assert owner is None and why is None or "owner" in why  # not mentioned by any bridge
    h.event("session.status", sessionID=child, status={"type": "busy"})
    owner, why = h.loop.actions.gate(child)
    assert owner is None and why == "child session (never injected)"
    assert h.loop.actions.gate("ses_missing") == (None, "no live owner for this session")
    h.event("session.status", sessionID="ses_missing", status={"type": "idle"})
    assert h.loop.actions.gate("ses_missing")[1] == (
        "session not readable in OpenCode's DB (fail-closed)")


def test_no_live_owner_records_and_never_injects(tmp_path):
    h = Harness(tmp_path)
    sid = h.rows.session("quiet-river")
    user = h.rows.user(sid)
    step = h.rows.assistant(sid, user, finish=None, text="", error=disconnect())
    h.rows.commit()
    h.loop.handle(DbRows(messages=(read_message(h, step),)))
    h.advance(60)
    assert h.bridge.sent == []
    [decision] = h.store.decisions(sid)
    assert "no live owner" in decision.reason
    h.loop.beat(h.clock.now())
    assert sid in h.store.heartbeat().info["no_owner"]


def test_unowned_step_is_rechecked_until_it_fails(tmp_path):
    h = Harness(tmp_path)
    sid = h.rows.session("quiet-river")
    user = h.rows.user(sid)
    step = h.rows.assistant(sid, user, finish=None, text="", completed=False)
    h.rows.commit()
    h.loop.handle(DbRows(messages=(read_message(h, step),)))
    h.advance(1)
    assert h.store.decisions(sid) == [] and len(h.loop.unowned) == 1
    # OpenCode writes the final error into the same row: no new row, found by the recheck.
    data = h.rows.conn.execute("SELECT data FROM message WHERE id = ?", (step,)).fetchone()[0]
    failed = {**json.loads(data), "error": disconnect(), "time": {"created": 1, "completed": 2}}
    h.rows.conn.execute("UPDATE message SET data = ? WHERE id = ?", (json.dumps(failed), step))
    h.rows.commit()
    h.advance(1)
    [decision] = h.store.decisions(sid)
    assert "no live owner" in decision.reason and len(h.loop.unowned) == 0
    assert h.bridge.sent == []


def test_bridge_closing_mid_backoff_fails_the_retry_after_grace(tmp_path):
    h = Harness(tmp_path)
    h.hello()
    sid = errored_session(h)
    h.closed()
    h.advance(60)
    assert h.prompts() == [] and h.store.open_injections(sid)[0].state == "intent"
    h.advance(60)
    assert h.prompts() == []
    [injection] = h.store.injections(sid)
    assert injection.state == "failed" and "no live owner" in (injection.error or "")


def test_bridge_refusal_marks_the_injection_failed_and_says_so(tmp_path, caplog):
    h = Harness(tmp_path)
    h.hello()
    sid = errored_session(h)
    h.advance(6)
    [prompt] = h.prompts()
    with caplog.at_level(logging.INFO, logger="opencode_autoretry.daemon.actions"):
        h.send(protocol.Ack(id=prompt.id, ok=False, error="child session"))
    [injection] = h.store.injections(sid)
    assert injection.state == "failed" and "child session" in (injection.error or "")
    assert f"injection {injection.id} {sid} failed: refused by the bridge" in caplog.text


def test_off_leaves_faults_alone_and_on_recovers_again(tmp_path):
    h = Harness(tmp_path)
    h.hello()
    sid = errored_session(h)
    reply = h.command(sid, "off")
    assert reply.ok and reply.message.startswith("autoretry off (all sessions)")
    assert "1 pending retry cancelled" in reply.message
    h.advance(10)
    assert h.prompts() == []
    other = errored_session(h)
    h.advance(10)
    assert h.prompts() == []
    assert h.store.decisions(other)[-1].reason == "skip: autoretry is off"
    assert h.command(sid, "on").message == "autoretry on (all sessions)"
    third = errored_session(h)
    h.advance(6)
    assert [p.session_id for p in h.prompts()] == [third]


def test_enabled_false_in_the_config_sends_nothing(tmp_path):
    h = Harness(tmp_path, enabled=False)
    h.hello()
    sid = errored_session(h)
    h.advance(10)
    assert h.prompts() == []
    assert h.store.decisions(sid)[0].reason == "skip: autoretry is off"


def test_off_here_only_switches_this_session(tmp_path):
    h = Harness(tmp_path)
    h.hello()
    h.command("ses_x", "off here")
    assert not h.store.is_enabled("ses_x") and h.store.is_enabled("ses_y")


def test_off_from_the_cli_is_seen_on_the_next_tick(tmp_path):
    h = Harness(tmp_path)
    h.hello()
    sid = errored_session(h)
    h.store.set_enabled(False, h.clock.now())  # what `autoretry off` writes
    h.advance(1)
    assert h.store.injections(sid)[0].state == "cancelled"
    h.advance(10)
    assert h.prompts() == []


def test_status_command_answers_from_memory(tmp_path):
    h = Harness(tmp_path)
    h.hello()
    sid = errored_session(h)
    reply = h.command(sid, "status")
    assert reply.ok and reply.message.startswith("autoretry: on · daemon up · 1 bridge(s)")
    assert "retry pending (disconnect" in reply.message
    assert not h.command(sid, "sideways").ok


def test_heartbeat_lists_bridges_and_owners(tmp_path):
    h = Harness(tmp_path)
    h.hello()
    sid = errored_session(h)
    h.advance(1)
    beat = h.store.heartbeat()
    assert beat is not None and beat.pid == 999
    assert beat.info["bridges"][0]["pid"] == PID
    assert beat.info["owners"] == {sid: PID}


def test_db_rows_confirm_marked_messages(tmp_path):
    h = Harness(tmp_path)
    h.hello()
    sid = errored_session(h)
    h.advance(6)
    [prompt] = h.prompts()
    mid = h.injected_row(sid, prompt)
    h.loop.handle(DbRows(messages=(read_message(h, mid),)))
    [injection] = h.store.injections(sid)
    assert injection.state == "confirmed" and injection.message_id == mid


def test_replayed_failure_after_restart_is_not_spent_again_d17(tmp_path):
    h = Harness(tmp_path)
    h.hello()
    sid = errored_session(h)
    restart(h)
    h.hello(pid=PID)
    h.error_then_idle(sid, disconnect())  # the same failure, reported again
    h.advance(6)
    assert len(h.store.injections(sid)) == 1 and len(h.prompts()) == 1
    [ledger] = h.store.ledgers(sid)
    assert sum(ledger.used.values()) == 1
