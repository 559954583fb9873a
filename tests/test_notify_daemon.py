"""Notifications from the daemon's one decision path, over fakes (fake clock, fake notifier)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from daemon_fakes import Harness
from opencode_rows import api_error

from opencode_autoretry.daemon.loop import Loop
from opencode_autoretry.daemon.notifications.notifier import DeliveryResult
from opencode_autoretry.notifications.events import Notification, NotifyEvent
from opencode_autoretry.notifications.records import notifications
from opencode_autoretry.opencode.db import OpenCodeDB


@dataclass
class FakeNotifier:
    channel_names: tuple[str, ...] = ("command", "webhook")
    queued: list[tuple[dict[str, int | None], Notification]] = field(default_factory=list)

    def enqueue(self, record_ids: dict[str, int | None], note: Notification) -> list[str]:
        self.queued.append((dict(record_ids), note))
        return []

    def events(self) -> list[str]:
        return [str(note.event) for _, note in self.queued]


def harness(tmp_path: Path, **notify: Any) -> tuple[Harness, FakeNotifier]:
    h = Harness(tmp_path, notify={"webhook": "http://127.0.0.1:9/h", **notify})
    return h, with_notifier(h)


def with_notifier(h: Harness) -> FakeNotifier:
    fake = FakeNotifier()
    h.loop = Loop(h.config, h.store, h.bridge, lambda: OpenCodeDB.open(h.settings.opencode_db),
                  h.timers, h.clock, rand=lambda: 0.0, pid=999, notifier=fake)
    h.loop.recovery.rebuild(h.clock.now())
    h.hello()
    return fake


def blank_turn(h: Harness, parent: str | None = None) -> tuple[str, str]:
    sid = h.session(parent)
    user = h.user(sid)
    h.chat(sid, user)
    h.status(sid, "busy")
    h.blank_step(sid, user)
    h.idle(sid)
    return sid, user


UNAUTHORIZED = api_error("Invalid API key (fake)", status=401, retryable=False)


def unauthorized_turn(h: Harness, parent: str | None = None, *, off: bool = False) -> str:
    """A turn whose step gets OpenCode's final 401 (no retry), judged by the loop."""
    sid = h.session(parent)
    if off:
        h.store.set_enabled(False, h.clock.now(), sid)
    user = h.user(sid)
    h.chat(sid, user)
    h.failed_step(sid, user, UNAUTHORIZED)
    h.error_then_idle(sid, UNAUTHORIZED)
    return sid


def continue_blank(h: Harness, sid: str) -> None:
    """The injected "Continue." lands in OpenCode and its reply is blank again."""
    prompt = h.prompts()[-1]
    h.injected_row(sid, prompt)
    h.chat(sid, "msg_inj", prompt.text, marker=dict(prompt.marker or {}))
    h.status(sid, "busy")
    user = h.store.current_turn(sid)
    assert user is not None
    h.blank_step(sid, user)
    h.idle(sid)


def test_one_gave_up_when_the_blank_budget_runs_out(tmp_path):
    h, fake = harness(tmp_path)
    sid, user = blank_turn(h)
    continue_blank(h, sid)
    continue_blank(h, sid)
    assert [d.action for d in h.store.decisions(sid)] == ["inject", "inject", "notify"]
    assert fake.events() == ["gave_up"]
    ids, note = fake.queued[0]
    assert note.session_id == sid and note.turn_id == user and note.kind == "blank"
    assert (note.attempts, note.budget) == (2, 2) and note.title == "scenario task"
    assert note.decision_id == h.store.decisions(sid)[-1].id
    rows = notifications(h.store, sid)
    assert [(r.channel, r.state) for r in rows] == [("command", "queued"), ("webhook", "queued")]
    h.idle(sid)
    h.advance(5)
    assert fake.events() == ["gave_up"]  # replays and idles add nothing


def test_one_terminal_after_a_401_in_a_root_turn_and_none_in_a_child(tmp_path):
    h, fake = harness(tmp_path)
    root = unauthorized_turn(h)
    assert fake.events() == ["terminal"]
    assert "HTTP 401" in (fake.queued[0][1].detail or "")
    assert "HTTP 401" in fake.queued[0][1].summary

    unauthorized_turn(h, root)
    assert fake.events() == ["terminal"]


def test_off_means_no_terminal_notification(tmp_path):
    h, fake = harness(tmp_path)
    unauthorized_turn(h, off=True)
    assert fake.events() == []


def recovered_blank(h: Harness) -> str:
    sid, user = blank_turn(h)
    prompt = h.prompts()[-1]
    h.injected_row(sid, prompt)
    h.chat(sid, "msg_inj", prompt.text, marker=dict(prompt.marker or {}))
    h.status(sid, "busy")
    h.good_step(sid, user)
    h.idle(sid)
    return sid


def test_a_recovered_blank_is_silent_by_default(tmp_path):
    h, fake = harness(tmp_path)
    recovered_blank(h)
    assert fake.events() == []


def test_recovered_when_enabled_once(tmp_path):
    h, fake = harness(tmp_path, events=["gave_up", "recovered"])
    sid = recovered_blank(h)
    h.idle(sid)
    assert fake.events() == ["recovered"]
    assert fake.queued[0][1].attempts == 1


def test_delivery_results_are_recorded_with_their_latency(tmp_path):
    h, fake = harness(tmp_path)
    sid, _ = blank_turn(h)
    continue_blank(h, sid)
    continue_blank(h, sid)
    ids, _ = fake.queued[0]
    h.clock.advance(0.25)
    h.loop.handle(DeliveryResult(ids["webhook"], "webhook", False, 2,
                                 "webhook http://127.0.0.1:9/h answered HTTP 500",
                                 h.clock.now(), 0.25))
    h.loop.handle(DeliveryResult(ids["command"], "command", True, 1, None, h.clock.now(), 0.2))
    rows = {r.channel: r for r in notifications(h.store, sid)}
    assert rows["command"].state == "sent" and rows["command"].latency_ms == 250
    assert rows["webhook"].state == "failed" and rows["webhook"].attempts == 2
    assert rows["webhook"].error is not None and "/h" not in rows["webhook"].error


def test_the_hourly_cap_suppresses_then_says_how_many_once(tmp_path):
    h, fake = harness(tmp_path, max_per_hour=1)
    for _ in range(3):
        unauthorized_turn(h)
    assert fake.events() == ["terminal"]
    assert [r.state for r in notifications(h.store) if r.channel == "*"] == ["suppressed"] * 2
    h.advance(timedelta(hours=1).total_seconds())
    h.advance(1)
    assert fake.events() == ["terminal", "suppressed"]
    assert fake.queued[-1][1].summary.startswith("2 more suppressed")


def test_a_restart_does_not_repeat_a_notification(tmp_path):
    h, fake = harness(tmp_path)
    root = unauthorized_turn(h)
    fake2 = with_notifier(h)  # same store and DB, a new loop
    h.event("session.error", sessionID=root, error=UNAUTHORIZED)
    h.idle(root)
    assert fake.events() == ["terminal"] and fake2.events() == []


def test_status_shows_deliveries(tmp_path):
    from opencode_autoretry.daemon.control import render_status, status_report

    h, fake = harness(tmp_path)
    sid, _ = blank_turn(h)
    continue_blank(h, sid)
    continue_blank(h, sid)
    ids, _ = fake.queued[0]
    h.loop.handle(DeliveryResult(ids["webhook"], "webhook", False, 2, "answered HTTP 500",
                                 h.clock.now(), 0.1))
    text = render_status(status_report(h.store, h.clock.now()))  # type: ignore[arg-type]
    assert "notifications (24 h): failed 1, queued 1" in text
    assert "gave_up via webhook: failed in 0 ms — answered HTTP 500" in text


def test_trace_lists_the_deliveries(tmp_path):
    from opencode_autoretry.diagnostics.records import load_records
    from opencode_autoretry.diagnostics.render import Style
    from opencode_autoretry.diagnostics.trace.report import build_trace, render_trace, trace_json

    h, fake = harness(tmp_path)
    sid, _ = blank_turn(h)
    continue_blank(h, sid)
    continue_blank(h, sid)
    ids, _ = fake.queued[0]
    h.clock.advance(0.084)
    h.loop.handle(DeliveryResult(ids["webhook"], "webhook", True, 1, None, h.clock.now(), 0.08))
    db = OpenCodeDB.open(h.settings.opencode_db)
    try:
        report = build_trace(db, load_records(h.settings.store, sid), now=h.clock.now(),
                             session_id=sid)
    finally:
        db.close()
    text = render_trace(report, Style())
    assert "Notifications: 2" in text
    assert "gave_up via webhook: ✓ sent (1 attempt, 84 ms) — decision #" in text
    assert "gave_up via command: … queued" in text
    assert '"event": "gave_up"' in trace_json(report)


# -- a daemon killed with notifications still queued (nothing lost) ---------------------------


def restarted(h: Harness, channels: tuple[str, ...] = ("command", "webhook")) -> FakeNotifier:
    """A new daemon on the same store and DB, started as ``autoretry run`` starts it."""
    fake = with_notifier(h)
    fake.channel_names = channels
    h.loop.start(h.clock.now())
    return fake


def test_a_notification_queued_when_the_daemon_died_is_sent_at_its_restart_once(tmp_path):
    h, fake = harness(tmp_path)
    unauthorized_turn(h)
    (ids, note), = fake.queued  # queued, never delivered: the daemon is killed here
    h.clock.advance(5)
    fake2 = restarted(h)
    (ids2, note2), = fake2.queued
    assert ids2 == ids
    # the same notification, its texts as the store keeps them (scrubbed: "key (fake)" is not
    # sent again); its summary is the row's message
    assert note2 == replace(note, detail=note2.detail)
    assert note2.summary == notifications(h.store)[0].message
    for channel, record_id in ids2.items():
        h.loop.handle(DeliveryResult(record_id, channel, True, 1, None, h.clock.now(), 0.1))
    rows = notifications(h.store)
    assert [r.state for r in rows] == ["sent", "sent"]
    assert [r.latency_ms for r in rows] == [5000, 5000]  # from the decision, as before
    assert all(r.payload is None for r in rows)  # a delivered row keeps no text
    assert restarted(h).queued == []  # delivered: never again


def test_a_notification_not_resent_closes_its_rows_with_why(tmp_path):
    h, fake = harness(tmp_path)
    unauthorized_turn(h)
    fake2 = restarted(h, channels=("command",))  # the webhook was removed from the config
    assert [ids for ids, _ in fake2.queued] == [{"command": fake.queued[0][0]["command"]}]
    webhook = next(r for r in notifications(h.store) if r.channel == "webhook")
    assert webhook.state == "failed"
    assert webhook.error == ("not delivered before the daemon stopped "
                             "(channel webhook no longer configured)")
    h.clock.advance(timedelta(days=1, seconds=1).total_seconds())
    assert restarted(h).queued == []  # the command row is still queued, but a day old
    assert {r.state for r in notifications(h.store)} == {"failed"}


def test_a_row_queued_by_an_older_release_is_closed_not_sent(tmp_path):
    h, fake = harness(tmp_path)
    unauthorized_turn(h)
    h.store._write("UPDATE notifications SET payload = NULL", ())
    assert restarted(h).queued == []
    rows = notifications(h.store)
    assert [r.state for r in rows] == ["failed", "failed"]
    assert all("kept without its text by an older release" in (r.error or "") for r in rows)


def test_a_queued_notification_keeps_no_secret_in_the_store(tmp_path):
    secret_hook = "http://127.0.0.1:9/hooks/T0SECRET/B0SECRET"
    h, fake = harness(tmp_path, webhook=secret_hook)
    sid = h.session()
    note = Notification(NotifyEvent.WAITING, sid, h.clock.now(), f"asked about {secret_hook}",
                        asked=f"post to {secret_hook}?", ask_id="que_1")
    assert h.loop.notifications.send(note, h.clock.now())
    payloads = [r.payload for r in notifications(h.store)]
    assert all(p and "SECRET" not in p for p in payloads)
    (_, resent), = restarted(h).queued
    assert resent.ask_id == "que_1" and resent.asked and "SECRET" not in resent.asked
