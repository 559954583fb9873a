"""Quota waits and "needs you" alerts in the daemon loop (issue 23), over fakes: a fake clock
(a laptop's sleep is the wall clock jumping), a fake bridge and notifier, a real store."""

from __future__ import annotations

import queue
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from daemon_fakes import Harness
from opencode_rows import api_error
from test_notify_daemon import FakeNotifier, with_notifier

from opencode_autoretry.causes import Cause
from opencode_autoretry.daemon.inbox import Shutdown
from opencode_autoretry.notifications.events import NotifyEvent
from opencode_autoretry.plugin_bridge import protocol

QUOTA = {"max_wait": 21600, "jitter": 0}
NOTIFY = {"webhook": "http://127.0.0.1:9/h", "waiting_after": 30}


def harness(tmp_path: Path) -> tuple[Harness, FakeNotifier]:
    h = Harness(tmp_path, quota=QUOTA, notify=NOTIFY)
    return h, with_notifier(h)


def usage_error(reset: datetime) -> dict[str, Any]:
    stamp = reset.astimezone(UTC).isoformat().replace("+00:00", "Z")
    return api_error(f"Usage limit reached for 5 hour. Your limit will reset at {stamp}",
                     status=429, headers={"retry-after-ms": "100"})


def usage_turn(h: Harness, reset_in: float, parent: str | None = None) -> str:
    """A root turn whose step ends on a usage limit resetting ``reset_in`` s from now."""
    sid = h.session(parent)
    user = h.user(sid)
    h.chat(sid, user)
    h.status(sid, "busy")
    error = usage_error(h.clock.now() + timedelta(seconds=reset_in))
    h.failed_step(sid, user, error)
    h.error_then_idle(sid, error)
    return sid


def causes(h: Harness, sid: str) -> list[Cause]:
    return [d.cause for d in h.store.decisions(sid)]


def test_a_usage_limit_continues_once_at_the_reset_never_before(tmp_path):
    h, fake = harness(tmp_path)
    sid = usage_turn(h, 20)
    [decision] = h.store.decisions(sid)
    assert decision.cause is Cause.QUOTA_WAIT and decision.group == "quota"
    [intent] = h.store.open_injections(sid)
    reset = h.clock.now() + timedelta(seconds=20)
    assert intent.due is not None and reset <= intent.due <= reset + timedelta(seconds=1.01)
    assert any(t.startswith("autoretry: quota resets at ") and t.endswith("continuing then")
               for t in h.toasts())
    assert fake.events() == ["waiting_quota"]
    h.advance(19)
    assert h.prompts() == []
    h.advance(3)
    [prompt] = h.prompts()
    assert prompt.text.startswith("Continue. The usage limit has reset")
    h.advance(60)
    assert len(h.prompts()) == 1


def test_a_restart_during_the_wait_still_continues_exactly_once(tmp_path):
    h, _ = harness(tmp_path)
    sid = usage_turn(h, 20)
    h.loop.beat(h.clock.now())  # the owners a restart needs (the loop beats on every send)
    h.sigkill()
    h.revive(5)
    assert h.timers.armed, "the stored wait is re-armed"
    h.hello()  # the same OpenCode's bridge comes back
    h.advance(10)
    assert h.prompts() == []
    h.advance(7)
    assert len(h.prompts()) == 1
    h.advance(60)
    assert len(h.prompts()) == 1 and causes(h, sid) == [Cause.QUOTA_WAIT]


def test_a_sleep_past_the_reset_is_caught_by_the_wall_clock(tmp_path):
    """A laptop asleep across the reset: the armed timer (monotonic) has not fired, the tick
    compares the stored due time with the wall clock and sends."""
    h, _ = harness(tmp_path)
    usage_turn(h, 600)
    h.timers.armed.clear()  # the timer never fires: the machine slept through it
    h.advance(3 * 3600)  # one tick after waking, hours later
    assert len(h.prompts()) == 1


def test_a_user_message_or_off_cancels_the_wait(tmp_path):
    h, _ = harness(tmp_path)
    wrote = usage_turn(h, 20)
    h.chat(wrote, h.user(wrote, "never mind"))
    off = usage_turn(h, 20)
    assert h.command(off, "off here").ok
    h.advance(60)
    assert h.prompts() == []
    reasons = {i.session_id: i.error for i in h.store.injections() if i.state == "cancelled"}
    assert "the user wrote a new message" in (reasons[wrote] or "")
    assert "switched off" in (reasons[off] or "")


def test_a_reset_beyond_max_wait_gives_up_and_nothing_waits(tmp_path):
    h, fake = harness(tmp_path)
    sid = usage_turn(h, 7 * 3600)
    assert causes(h, sid) == [Cause.GAVE_UP]
    assert h.store.open_injections(sid) == [] and fake.events() == ["gave_up"]
    assert "max_wait" in (fake.queued[0][1].detail or "")
    h.advance(8 * 3600)
    assert h.prompts() == []


def test_a_child_session_never_waits(tmp_path):
    h, fake = harness(tmp_path)
    root = h.session()
    child = usage_turn(h, 20, parent=root)
    assert Cause.QUOTA_WAIT not in causes(h, child) and h.store.open_injections(child) == []
    h.advance(60)
    assert h.prompts() == [] and fake.events() == []


# --- "needs you" -------------------------------------------------------------------------------


def ask_permission(h: Harness, sid: str, ask_id: str = "per_1") -> None:
    h.event("permission.asked", sessionID=sid, id=ask_id, permission="bash",
            patterns=["git push *"], metadata={}, always=[], tool={})


def waiting_notes(fake: FakeNotifier) -> list[Any]:
    return [note for _, note in fake.queued if note.event is NotifyEvent.WAITING]


def test_one_waiting_alert_per_ask_after_waiting_after(tmp_path):
    h, fake = harness(tmp_path)
    sid, _ = h.busy_turn()
    ask_permission(h, sid)
    h.advance(29)
    assert waiting_notes(fake) == []
    h.advance(2)
    [note] = waiting_notes(fake)
    assert note.session_id == sid and note.asked == "bash: git push *"
    assert "waits on a permission (bash: git push *)" in note.summary
    assert note.as_json()["event"] == "waiting" and note.as_json()["ask"] == "bash: git push *"
    h.advance(60)
    assert len(waiting_notes(fake)) == 1  # one per ask
    h.event("question.asked", sessionID=sid, id="que_1",
            questions=[{"question": "SQLite or Postgres?\nPick one.", "header": "Store"}])
    h.advance(31)
    assert [n.asked for n in waiting_notes(fake)] == ["bash: git push *", "SQLite or Postgres?"]
    assert h.loop.alerts.alert_ms and max(h.loop.alerts.alert_ms) < 1000


def test_no_alert_for_an_answered_ask_a_child_or_a_session_switched_off(tmp_path):
    h, fake = harness(tmp_path)
    answered, _ = h.busy_turn()
    ask_permission(h, answered, "per_a")
    h.advance(10)
    h.event("permission.replied", sessionID=answered, requestID="per_a", reply="once")
    idled, _ = h.busy_turn()
    ask_permission(h, idled, "per_i")
    h.idle(idled)  # idle: nothing is asked any more
    root = h.session()
    child = h.session(root)
    h.status(child, "busy")
    ask_permission(h, child, "per_c")
    off, _ = h.busy_turn()
    h.store.set_enabled(False, h.clock.now(), off)
    ask_permission(h, off, "per_o")
    h.advance(60)
    assert waiting_notes(fake) == []
    # the fence: a root ask that is left alone is announced (the alerts do work)
    sid, _ = h.busy_turn()
    ask_permission(h, sid, "per_r")
    h.advance(31)
    assert [n.ask_id for n in waiting_notes(fake)] == ["per_r"]


def test_the_question_text_is_one_safe_line(tmp_path):
    h, fake = harness(tmp_path)
    sid, _ = h.busy_turn()
    h.event("question.asked", sessionID=sid, id="que_x",
            questions=[{"question": "\x1b]52;c;ZXZpbA==\x07Delete   all?\nreally", "header": "x"}])
    h.advance(31)
    [note] = waiting_notes(fake)
    assert "\x1b" not in (note.asked or "") and note.asked == "\\x1b]52;c;ZXZpbA==\\x07Delete all?"


# --- figures: wake-up precision with the real loop thread -------------------------------------


class JumpClock:
    """The wall clock, which a test can move forward at once (a sleep's wake-up)."""

    def __init__(self) -> None:
        self.offset = timedelta(0)

    def now(self) -> datetime:
        return datetime.now(tz=UTC) + self.offset


def test_wake_up_precision_after_a_simulated_sleep(tmp_path, record_property):
    """The loop thread runs for real (tick_interval 1 s); no timer fires (the machine slept
    through it); the wall clock jumps past the due time: the continuation goes out within one
    tick of the wake-up."""
    h = Harness(tmp_path, quota=QUOTA, notify=NOTIFY)
    sid = usage_turn(h, 600)
    [intent] = h.store.open_injections(sid)
    assert intent.due is not None
    clock = JumpClock()
    clock.offset = h.clock.now() - datetime.now(tz=UTC)
    h.loop.clock = clock  # the same loop (its bridge, its sessions), now on a wall clock
    inbox: queue.Queue[object] = queue.Queue()
    thread = threading.Thread(target=h.loop.run, args=(inbox,), daemon=True)
    thread.start()
    h.timers.armed.clear()  # the machine slept through the timer
    ticked = time.monotonic() + 10  # the loop has started and ticked once: a wake-up mid-tick
    while h.loop._last_evict is None and time.monotonic() < ticked:
        time.sleep(0.005)
    clock.offset += intent.due - clock.now() + timedelta(seconds=30)  # wakes 30 s past due
    woke = time.monotonic()
    deadline = woke + 10
    while not h.bridge.of(protocol.Prompt) and time.monotonic() < deadline:
        time.sleep(0.005)
    late = time.monotonic() - woke
    inbox.put(Shutdown("test"))
    thread.join(10)
    assert h.bridge.of(protocol.Prompt), "the continuation went out after the wake-up"
    record_property("wake_after_sleep_s", round(late, 3))
    print(f"\nwake-up after a simulated sleep: continuation {late:.3f} s after the clock jump")
    assert late <= h.settings.tick_interval + 2.0


def test_status_shows_the_quota_wait(tmp_path):
    from opencode_autoretry.daemon.control import render_status, status_report
    from opencode_autoretry.store.database import StoreView

    h, _ = harness(tmp_path)
    sid = usage_turn(h, 20)
    view = StoreView.open(h.settings.store)
    try:
        report = status_report(view, h.clock.now())
    finally:
        view.close()
    [pending] = report["pending"]
    assert pending["session_id"] == sid and pending["quota_resets_at"]
    assert "(waiting for the quota reset at " in render_status(report)
    reply = h.command(sid, "status here")
    assert "waiting for the quota reset (continuing at " in reply.message


def test_a_fallback_model_is_switched_to_instead_of_waiting(tmp_path):
    h = Harness(tmp_path, quota=QUOTA, fallback={"fake/fake-model": ["fake/fake-b"]})
    sid = usage_turn(h, 20)
    [decision] = h.store.decisions(sid)
    assert decision.cause is Cause.MODEL_SWITCH and decision.facts.switch is not None
    assert decision.facts.switch.to_model == "fake/fake-b"
    [prompt] = h.prompts()  # at once, on the next model; no quota wait
    assert prompt.model is not None and prompt.model.model_id == "fake-b"


def test_status_names_what_a_session_waits_on(tmp_path):
    from opencode_autoretry.daemon.control import heartbeat_info, render_status

    h, _ = harness(tmp_path)
    sid, _ = h.busy_turn()
    ask_permission(h, sid)
    entry = heartbeat_info(h.loop)["sessions"][sid]
    assert entry["waiting"] == ["permission"]
    assert entry["asked"][0]["what"] == "bash: git push *"
    h.advance(31)  # alerted: still shown while it is asked
    assert heartbeat_info(h.loop)["sessions"][sid]["asked"][0]["kind"] == "permission"
    report = {"enabled": True, "switches": {}, "daemon": {"running": False}, "bridges": [],
              "sessions": {sid: heartbeat_info(h.loop)["sessions"][sid]}, "no_owner": [],
              "turns": [], "pending": [], "decisions": []}
    assert "waiting on the user: permission (bash: git push *) since " in render_status(report)
    h.event("permission.replied", sessionID=sid, requestID="per_1", reply="once")
    assert "asked" not in heartbeat_info(h.loop)["sessions"][sid]
