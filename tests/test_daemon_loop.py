"""The loop end to end over fakes: events in, decisions recorded, prompts out (deterministic)."""

from __future__ import annotations

from datetime import timedelta

from daemon_fakes import Harness, disconnect
from opencode_rows import aborted_error, api_error

from opencode_autoretry.plugin_bridge import protocol


def test_disconnect_is_continued_once_after_the_backoff(tmp_path):
    h = Harness(tmp_path)
    h.hello()
    sid, user, step = h.failed_turn()

    h.error_then_idle(sid, disconnect())

    decisions = h.store.decisions(sid)
    assert [d.action for d in decisions] == ["inject_at"]
    assert decisions[0].message_id == step
    assert h.prompts() == []  # not before the 5 s backoff
    assert h.toasts() == ["autoretry: connection lost — continuing in 5 s (1/2)"]
    [intent] = h.store.open_injections(sid)
    assert intent.state == "intent" and intent.due == decisions[0].at + timedelta(seconds=5)

    h.advance(4.9)
    assert h.prompts() == []
    h.advance(0.2)
    [prompt] = h.prompts()
    assert prompt.session_id == sid and prompt.agent == "build"
    assert prompt.model == protocol.ModelRef("fake", "fake-model")
    assert prompt.marker == {"decision": str(decisions[0].id), "injection": str(intent.id),
                             "kind": "disconnect"}
    assert h.store.open_injections(sid)[0].state == "sent"

    h.chat(sid, "msg_zzz", prompt.text, marker=dict(prompt.marker))
    assert h.store.open_injections(sid) == []
    assert h.store.injections(sid)[0].state == "confirmed"
    h.advance(30)
    assert len(h.prompts()) == 1


def test_error_and_duplicate_idles_make_one_decision_d18(tmp_path):
    h = Harness(tmp_path)
    h.hello()
    sid, _, _ = h.failed_turn()
    h.error_then_idle(sid, disconnect())
    h.idle(sid)
    assert len(h.store.decisions(sid)) == 1
    assert len(h.store.injections(sid)) == 1


def test_blank_completion_is_continued_at_once(tmp_path):
    h = Harness(tmp_path)
    h.hello()
    sid, user = h.busy_turn()
    h.blank_step(sid, user)
    h.idle(sid)
    [prompt] = h.prompts()
    assert prompt.text == "Continue."
    assert prompt.marker and prompt.marker["kind"] == "blank"
    assert [d.action for d in h.store.decisions(sid)] == ["inject"]


def test_three_failures_spend_two_injections_then_notify_d14_d17(tmp_path):
    h = Harness(tmp_path)
    h.hello()
    sid, user, _ = h.failed_turn()
    for attempt in range(3):
        h.error_then_idle(sid, disconnect())
        h.advance(11)
        if attempt < 2:
            prompt = h.prompts()[-1]
            h.chat(sid, None, prompt.text, marker=dict(prompt.marker))
            injected = h.injected_row(sid, prompt)
            h.status(sid, "busy")
            h.failed_step(sid, injected)
    assert len(h.prompts()) == 2
    assert [d.action for d in h.store.decisions(sid)] == ["inject_at", "inject_at", "notify"]
    assert "retried 2 times, still failing" in h.toasts()[-1]
    # More error events of the same turn never restart the budget (D17).
    h.error_then_idle(sid, disconnect())
    h.advance(30)
    assert len(h.prompts()) == 2

    # A real user message opens a fresh budget (D16).
    fresh = h.user(sid, "try again please")
    h.chat(sid, fresh, "try again please")
    h.status(sid, "busy")
    h.failed_step(sid, fresh)
    h.error_then_idle(sid, disconnect())
    h.advance(6)
    assert len(h.prompts()) == 3
    assert h.store.decisions(sid)[-1].turn_id == fresh


def test_never_injects_while_opencode_retries_itself(tmp_path):
    h = Harness(tmp_path)
    h.hello()
    sid, _, _ = h.failed_turn()
    for attempt in range(1, 6):
        h.status(sid, "retry", attempt=attempt, message="Connection reset by server",
                 next=1796041233286)
        h.advance(10)
    assert h.store.decisions(sid) == [] and h.prompts() == []
    h.error_then_idle(sid, api_error("Connection reset by server", code="ECONNRESET"))
    h.advance(6)
    assert len(h.prompts()) == 1


def test_retry_status_cancels_a_waiting_retry(tmp_path):
    h = Harness(tmp_path)
    h.hello()
    sid, _, _ = h.failed_turn()
    h.error_then_idle(sid, disconnect())
    h.status(sid, "retry", attempt=1, message="again", next=1796041233286)
    h.advance(10)
    assert h.prompts() == []
    assert h.store.injections(sid)[0].state == "cancelled"


def test_user_abort_is_not_continued(tmp_path):
    h = Harness(tmp_path)
    h.hello()
    sid, _, _ = h.failed_turn(aborted_error())
    h.error_then_idle(sid, aborted_error())
    h.advance(30)
    assert h.prompts() == []
    [ledger] = h.store.ledgers(sid)
    assert ledger.user_aborted


def test_rate_limit_waits_for_retry_after(tmp_path):
    h = Harness(tmp_path)
    h.hello()
    error = api_error("Rate limit exceeded", status=429, headers={"retry-after": "7"})
    sid, user, _ = h.failed_turn(error)
    h.error_then_idle(sid, error)
    [decision] = h.store.decisions(sid)
    assert decision.due is not None and decision.due - decision.at >= timedelta(seconds=7)
    h.advance(6.9)
    assert h.prompts() == []
    h.advance(0.2)
    assert len(h.prompts()) == 1


def test_a_real_user_message_cancels_the_pending_retry(tmp_path):
    h = Harness(tmp_path)
    h.hello()
    sid, _, _ = h.failed_turn()
    h.error_then_idle(sid, disconnect())
    newer = h.user(sid, "never mind, do this instead")
    h.chat(sid, newer, "never mind, do this instead")
    h.advance(10)
    assert h.prompts() == []
    assert h.store.injections(sid)[0].error == "cancelled: the user wrote a new message"


def test_autoretry_command_is_not_a_real_user_message(tmp_path):
    h = Harness(tmp_path)
    h.hello()
    sid, _, _ = h.failed_turn()
    h.error_then_idle(sid, disconnect())
    h.send(protocol.ChatMessage(t=0, session_id=sid, text="/autoretry status", command=True))
    h.advance(6)
    assert len(h.prompts()) == 1


def test_permission_pending_means_nothing_happens(tmp_path):
    h = Harness(tmp_path)
    h.hello()
    sid, user = h.busy_turn()
    h.event("permission.asked", id="per_1", sessionID=sid, permission="external_directory")
    h.advance(h.settings.stall_timeout + 60)
    assert h.bridge.of(protocol.Abort) == [] and h.prompts() == []
    assert h.store.decisions(sid) == []


def test_stall_is_aborted_then_continued(tmp_path):
    h = Harness(tmp_path)
    h.hello()
    sid, user = h.busy_turn()
    h.rows.assistant(sid, user, finish=None, text="", completed=False)
    h.rows.commit()
    h.advance(h.settings.stall_timeout - 1)
    assert h.bridge.of(protocol.Abort) == []
    h.advance(2)
    assert len(h.bridge.of(protocol.Abort)) == 1
    [decision] = h.store.decisions(sid)
    assert decision.kind == "stall" and decision.action == "abort_then_inject"
    # Our abort's error and idles are not failures; the continuation follows the idle.
    h.error_then_idle(sid, aborted_error())
    assert len(h.prompts()) == 1
    assert not h.store.ledgers(sid)[0].user_aborted


def test_runaway_unknown_finish_loop_is_aborted(tmp_path):
    h = Harness(tmp_path, runaway_steps=6)
    h.hello()
    sid, user = h.busy_turn()
    for _ in range(6):
        step = h.rows.assistant(sid, user, finish="unknown", toks={"total": 0, "input": 0,
                                "output": 0, "reasoning": 0, "cache": {"read": 0, "write": 0}},
                                text=None)
        h.rows.commit()
        h.event("message.updated", sessionID=sid, info={
            "id": step, "sessionID": sid, "role": "assistant", "parentID": user,
            "finish": "unknown", "tokens": {"output": 0}, "time": {"completed": 1}})
        h.status(sid, "busy")
    assert len(h.bridge.of(protocol.Abort)) == 1
    [decision] = h.store.decisions(sid)
    assert decision.kind == "runaway"
    assert "no finish reason" in decision.reason
