"""Pure notification logic: which decisions raise which event, the payload, the limits."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from opencode_autoretry.causes import Cause, Facts
from opencode_autoretry.decisions.budget import DecisionContext, decide, new_ledger
from opencode_autoretry.decisions.policy import load_policy
from opencode_autoretry.models import Action, Decision, Kind, Verdict
from opencode_autoretry.notifications.events import (
    TERMINAL_SKIP_REASON,
    Admission,
    Notification,
    NotifyEvent,
    Throttle,
    event_for,
    ntfy_request,
    slack_body,
)

NOW = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)


def notify_decision(kind: Kind) -> Decision:
    return Decision(Action.NOTIFY, Cause.BUDGET_SPENT, "ses_a", "msg_u", kind=kind, used_after=2,
                    limit=2, text="autoretry: retried 2 times, still failing (blank)",
                    facts=Facts(note="notify: …"))


@pytest.mark.parametrize("kind, event", [
    (Kind.BLANK, NotifyEvent.GAVE_UP),
    (Kind.RATE_LIMIT, NotifyEvent.GAVE_UP),
    (Kind.REPETITION, NotifyEvent.LOOP_STOPPED),
    (Kind.STALL, NotifyEvent.STALL_UNRECOVERED),
])
def test_a_notify_decision_raises_its_event_in_a_root_session(kind, event):
    assert event_for(notify_decision(kind), is_child=False) is event
    assert event_for(notify_decision(kind), is_child=True) is None
    assert event_for(notify_decision(kind), is_child=None) is None  # fail-closed


def terminal_decision(**context: object) -> Decision:
    verdict = Verdict(Kind.TERMINAL, False, "the provider rejected the request (HTTP 401)",
                      message_id="msg_a")
    ctx = DecisionContext(session_id="ses_a", **context)  # type: ignore[arg-type]
    decision, _ = decide(new_ledger("ses_a", "msg_u"), verdict, ctx, load_policy({}), NOW)
    return decision


def test_the_budget_cores_terminal_reason_is_the_one_recognised():
    decision = terminal_decision(is_child=False)
    assert decision.reason == TERMINAL_SKIP_REASON
    assert event_for(decision, is_child=False) is NotifyEvent.TERMINAL


def test_terminal_is_silent_when_off_or_in_a_child():
    assert event_for(terminal_decision(is_child=False, enabled=False), is_child=False) is None
    assert event_for(terminal_decision(is_child=True), is_child=True) is None


@pytest.mark.parametrize("action", [Action.SKIP, Action.INJECT, Action.INJECT_AT])
def test_other_decisions_raise_nothing(action):
    decision = Decision(action, Cause.USER_ABORT, "ses_a", "t", kind=Kind.BLANK)
    assert event_for(decision, is_child=False) is None


def test_the_payload_names_everything_and_says_how_to_resume():
    note = Notification(NotifyEvent.GAVE_UP, "ses_a", NOW, "notify: blank …", title="Fix it",
                        directory="/work/p", turn_id="msg_u", kind="blank", attempts=2, budget=2,
                        decision_id=7, detail="autoretry: retried 2 times, still failing (blank)")
    body = note.as_json()
    assert body["event"] == "gave_up" and body["session_id"] == "ses_a"
    assert body["title"] == "Fix it" and body["directory"] == "/work/p"
    assert (body["kind"], body["attempts"], body["budget"]) == ("blank", 2, 2)
    assert body["time"] == NOW.isoformat() and body["reason"] == "notify: blank …"
    assert body["resume"] == "cd /work/p && opencode --session ses_a and send a message " \
                             "(a new message starts fresh budgets)."
    assert "after 2/2 in 'Fix it'" in body["message"]
    assert slack_body(note)["text"].startswith("*autoretry gave up*\n")


def test_ntfy_publishes_json_to_the_server_root_with_the_topic():
    note = Notification(NotifyEvent.TERMINAL, "ses_a", NOW, "401")
    url, body = ntfy_request(note, "https://ntfy.example/secret-topic")
    assert url == "https://ntfy.example/"
    assert body["topic"] == "secret-topic" and body["title"].startswith("autoretry")


def test_throttle_one_per_session_turn_and_event():
    throttle = Throttle(10)
    assert throttle.admit("s", "t", "gave_up", NOW) is Admission.SEND
    assert throttle.admit("s", "t", "gave_up", NOW) is Admission.DUPLICATE
    assert throttle.admit("s", "t", "terminal", NOW) is Admission.SEND
    assert throttle.admit("s", "t2", "gave_up", NOW) is Admission.SEND


def test_throttle_caps_per_hour_and_announces_the_rest_once():
    throttle = Throttle(2)
    results = [throttle.admit("s", f"t{i}", "gave_up", NOW) for i in range(5)]
    assert results == [Admission.SEND] * 2 + [Admission.CAPPED] * 3
    assert throttle.take_suppressed(NOW + timedelta(minutes=59)) == 0  # still full
    later = NOW + timedelta(hours=1)
    assert throttle.take_suppressed(later) == 3
    assert throttle.take_suppressed(later) == 0
    assert throttle.admit("s", "t9", "gave_up", later) is Admission.SEND


def test_a_kept_notification_reads_back_whole_and_garbage_reads_as_none():
    from opencode_autoretry.notifications.events import from_kept, kept_form

    note = Notification(
        NotifyEvent.WAITING, "ses_1", datetime(2026, 12, 3, 5, 0, tzinfo=UTC), "asked",
        title="t ✓", directory="/w", turn_id="msg_1", kind="blank", attempts=2, budget=3,
        decision_id=7, detail="d", suppressed=0, observed=True, ask_id="per_1", asked="rm?",
    )
    assert from_kept(kept_form(note, str)) == note
    assert from_kept(kept_form(note, str.upper)) == replace(
        note, reason="ASKED", title="T ✓", directory="/W", detail="D", asked="RM?")
    for garbage in (None, "", "[]", "{}", "not json", '{"event": "nope", "time": "x"}'):
        assert from_kept(garbage) is None
