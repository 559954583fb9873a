"""A hello names the sessions its bridge saw (issue 11): the daemon owns them again, with their
live state, and a failure only skipped for want of an owner is judged again, exactly once,
through the gap review. Negative cases: a wait on the user, a child, a switched-off session, a
user abort and a session another live bridge owns stay untouched."""

from __future__ import annotations

from typing import Any

import pytest
from daemon_fakes import CONN, PID, Harness
from opencode_rows import aborted_error

from opencode_autoretry.daemon.inbox import BridgeConnected
from opencode_autoretry.daemon.sessions import OWNER_GRACE
from opencode_autoretry.plugin_bridge import protocol

NO_OWNER = "skip: no live owner (recorded, never injected)"
IDLE: dict[str, Any] = {"status": "idle"}


def hello(h: Harness, sessions: dict[str, dict[str, Any]] | None, conn: str = CONN,
          pid: int = PID) -> None:
    """A hello as the bridge sends it (``sessions`` None: a bridge older than the field)."""
    h.bridge.alive.add(conn)
    message = protocol.Hello(pid=pid, directory="/work/project", sessions=sessions)
    h.loop.handle(BridgeConnected(conn, message, h.clock.now()))


def created_just_before_a_kill(h: Harness, *, parent: str | None = None) -> tuple[str, str]:
    """The soak's case: a beat, then a new session and its prompt, then SIGKILL before the
    next beat; its turn then fails with a blank reply while the daemon is down."""
    hello(h, {})
    h.loop.beat(h.clock.now())
    sid = h.session(parent)
    user = h.user(sid)
    h.chat(sid, user)
    h.status(sid, "busy")
    h.sigkill()
    h.blank_step(sid, user)
    return sid, user


def test_a_session_no_heartbeat_named_is_continued_once_its_bridge_names_it(tmp_path):
    h = Harness(tmp_path)
    sid, _ = created_just_before_a_kill(h)
    h.revive()
    h.advance(1)  # the look-back judges it ownerless: nobody owns it yet
    assert [d.reason for d in h.store.decisions(sid)] == [NO_OWNER]
    hello(h, {sid: IDLE})
    h.advance(1)
    assert [p.session_id for p in h.prompts()] == [sid]
    # Exactly once: the next reconnects name it again and judge nothing more.
    for conn in ("b2", "b3"):
        h.closed(h.loop.sessions.ensure(sid).owner or CONN)
        hello(h, {sid: IDLE}, conn=conn)
        h.advance(OWNER_GRACE.total_seconds())
    assert len(h.prompts()) == 1 and len(h.store.injections(sid)) == 1


def test_without_the_named_sessions_the_failure_stays_recorded_never_sent(tmp_path):
    # The bug as it was: an older bridge's hello names nothing; nothing can be sent.
    h = Harness(tmp_path)
    sid, _ = created_just_before_a_kill(h)
    h.revive()
    h.advance(1)
    hello(h, None)
    h.advance(OWNER_GRACE.total_seconds() + 10)
    assert h.prompts() == [] and [d.reason for d in h.store.decisions(sid)] == [NO_OWNER]


def test_a_hello_before_the_first_look_back_owns_the_session_for_it(tmp_path):
    h = Harness(tmp_path)
    sid, _ = created_just_before_a_kill(h)
    h.revive()
    hello(h, {sid: IDLE})  # before any tick: the look-back runs with the owner known
    h.advance(1)
    h.advance(OWNER_GRACE.total_seconds())
    assert [p.session_id for p in h.prompts()] == [sid]
    assert [d.action for d in h.store.decisions(sid)] == ["inject"]


def test_a_named_session_waiting_on_a_permission_stays_untouched(tmp_path):
    h = Harness(tmp_path)
    sid, _ = created_just_before_a_kill(h)
    h.revive()
    h.advance(1)
    hello(h, {sid: {"status": "busy", "permissions": ["per_1"]}})
    h.advance(OWNER_GRACE.total_seconds() + 10)
    view = h.loop.sessions.ensure(sid)
    assert (view.owner, view.status, view.permissions) == (CONN, "busy", {"per_1"})
    assert h.prompts() == []



def test_an_ask_whose_reply_never_arrived_ends_with_the_sessions_idle(tmp_path):
    # The hello restores an open permission ask; its reply event is lost. Once the session is
    # idle (OpenCode keeps it busy while it waits on the user), a later turn's failure is
    # judged as any other, not held as "waiting for a permission answer" for good.
    h = Harness(tmp_path)
    sid, user = created_just_before_a_kill(h)
    h.revive()
    hello(h, {sid: {"status": "busy", "permissions": ["per_1"]}})
    h.good_step(sid, user)
    h.idle(sid)
    assert h.loop.sessions.ensure(sid).permissions == set()
    second = h.user(sid)
    h.chat(sid, second)
    h.status(sid, "busy")
    h.blank_step(sid, second)
    h.idle(sid)
    assert [p.session_id for p in h.prompts()] == [sid]

def test_a_named_idle_session_with_an_open_question_is_not_sent_to(tmp_path):
    h = Harness(tmp_path)
    sid, _ = created_just_before_a_kill(h)
    h.revive()
    h.advance(1)
    hello(h, {sid: {"status": "idle", "questions": ["que_1"]}})
    h.advance(OWNER_GRACE.total_seconds() + 10)
    assert h.loop.gap.judged == 2  # judged again, with the open question known ...
    assert h.prompts() == [] and h.loop.sessions.ensure(sid).questions == {"que_1"}  # ... unsent


def test_a_named_child_session_is_never_prompted(tmp_path):
    h = Harness(tmp_path)
    parent = h.session()
    child, _ = created_just_before_a_kill(h, parent=parent)
    h.revive()
    h.advance(1)
    hello(h, {parent: IDLE, child: IDLE})
    h.advance(OWNER_GRACE.total_seconds() + 10)
    assert [p for p in h.prompts() if p.session_id == child] == []


def test_a_named_session_switched_off_is_not_continued(tmp_path):
    h = Harness(tmp_path)
    sid, _ = created_just_before_a_kill(h)
    h.revive()
    h.advance(1)
    h.store.set_enabled(False, h.clock.now(), sid)  # /autoretry off here, from another window
    hello(h, {sid: IDLE})
    h.advance(OWNER_GRACE.total_seconds() + 10)
    assert h.prompts() == []


def test_a_user_abort_in_the_gap_is_not_continued_when_named(tmp_path):
    h = Harness(tmp_path)
    hello(h, {})
    h.loop.beat(h.clock.now())
    sid = h.session()
    user = h.user(sid)
    h.chat(sid, user)
    h.sigkill()
    h.rows.assistant(sid, user, finish=None, text="", error=aborted_error())
    h.rows.commit()
    h.revive()
    h.advance(1)
    hello(h, {sid: IDLE})
    h.advance(OWNER_GRACE.total_seconds() + 10)
    assert h.prompts() == []


def test_a_session_another_live_bridge_owns_is_not_taken(tmp_path):
    h = Harness(tmp_path)
    hello(h, {})
    sid = h.session()  # b1 reports it
    h.status(sid, "busy")
    hello(h, {sid: IDLE}, conn="b2", pid=PID + 1)  # a second process saw it once
    view = h.loop.sessions.ensure(sid)
    assert (view.owner, view.status) == (CONN, "busy")


def test_a_named_busy_session_is_left_to_its_live_events(tmp_path):
    h = Harness(tmp_path)
    sid, _ = created_just_before_a_kill(h)
    h.revive()
    h.advance(1)
    hello(h, {sid: {"status": "retry", "next": int(h.clock.now().timestamp() * 1000) + 5000}})
    h.advance(2)
    assert h.prompts() == []
    assert h.loop.sessions.ensure(sid).retry_next is not None
    h.idle(sid)  # OpenCode stopped retrying: the live path judges the turn, once
    h.advance(OWNER_GRACE.total_seconds())
    assert [p.session_id for p in h.prompts()] == [sid]


def test_a_socket_cut_forgets_nothing_the_hello_restores(tmp_path):
    h = Harness(tmp_path)
    hello(h, {})
    sid = h.session()
    h.status(sid, "busy")
    h.event("permission.asked", sessionID=sid, id="per_1")
    h.closed()  # the daemon drops the connection's live state ...
    assert h.loop.sessions.ensure(sid).permissions == set()
    hello(h, {sid: {"status": "busy", "permissions": ["per_1"]}}, conn="b2")  # ... and gets it back
    view = h.loop.sessions.ensure(sid)
    assert (view.owner, view.status, view.permissions) == ("b2", "busy", {"per_1"})


def test_a_busy_session_through_a_socket_cut_is_no_stall_once_it_moves_again(tmp_path):
    """Found by the short soak: the turn went on while the bridge reconnected; the hello said
    busy, and the clock of the old connection made the next stall check fire at once."""
    h = Harness(tmp_path)
    hello(h, {})
    sid, user = h.busy_turn()
    h.rows.assistant(sid, user, finish=None, text="", completed=False)
    h.rows.commit()
    h.closed()
    h.advance(h.settings.stall_timeout + 1)  # the bridge's reconnect took that long
    hello(h, {sid: {"status": "busy"}}, conn="b2")
    h.advance(1)
    assert h.bridge.of(protocol.Abort) == [] and h.store.decisions(sid) == []
    h.event("message.part.updated", conn="b2", sessionID=sid, part={})  # it moves: a new clock
    h.advance(h.settings.stall_timeout + 1)  # and a real stall after it is still one
    assert len(h.bridge.of(protocol.Abort)) == 1


def test_the_hello_owners_reach_the_next_heartbeat(tmp_path):
    h = Harness(tmp_path)
    sid, _ = created_just_before_a_kill(h)
    h.revive()
    hello(h, {sid: {"status": "busy"}})
    h.advance(1)
    beat = h.store.heartbeat()
    assert beat is not None and beat.info["owners"].get(sid) == PID


def blank_reply_written(h: Harness) -> str:
    """A session of the bridge's whose reply came back blank; its idle is still to come."""
    hello(h, {})
    sid = h.session()
    user = h.user(sid)
    h.chat(sid, user)
    h.status(sid, "busy")
    h.blank_step(sid, user)
    return sid


def blank_turn_decided(h: Harness, *, write_fails: bool, ticks_before_close: int = 0) -> str:
    """A blank reply is decided and its continuation goes out at once, into a socket that is
    being cut (the write fails, or succeeds and the bridge never reads the line); the close
    reaches the daemon just after, or after some ticks of the loop."""
    sid = blank_reply_written(h)
    if write_fails:
        h.bridge.alive = set()
    h.idle(sid)
    for _ in range(ticks_before_close):
        h.advance(0.2)  # AUTORETRY_TICK_INTERVAL in the e2e suite: a tick tries what is due
    h.closed()
    return sid


def cut_under_the_send(h: Harness) -> str:
    """Found by the long soak: the write fails, so the line never left whole."""
    sid = blank_turn_decided(h, write_fails=True)
    [injection] = h.store.injections(sid)
    assert injection.state == "intent" and h.prompts() == []
    return sid


def test_a_continuation_whose_send_met_a_socket_cut_goes_out_after_the_hello(tmp_path):
    h = Harness(tmp_path)
    sid = cut_under_the_send(h)
    hello(h, {sid: IDLE}, conn="b2")
    h.advance(OWNER_GRACE.total_seconds())
    assert [(c, p.session_id) for c, p in h.bridge.sent if p in h.prompts()] == [("b2", sid)]
    assert [d.action for d in h.store.decisions(sid)] == ["inject"]  # decided once
    assert len(h.store.injections(sid)) == 1


def test_a_continuation_cut_off_from_a_bridge_that_never_returns_fails_unsent(tmp_path):
    h = Harness(tmp_path)
    sid = cut_under_the_send(h)
    h.advance(OWNER_GRACE.total_seconds() + 10)
    assert h.prompts() == []
    [injection] = h.store.injections(sid)
    assert injection.state == "failed" and "no live owner" in (injection.error or "")


def test_a_continuation_is_never_tried_again_on_the_connection_its_write_broke_on(tmp_path):
    # Found by the short soak: the connection's close reached the loop 0.1 s after the
    # broken write, and in between the due continuation was tried three more times on the
    # same dead connection, which failed it for good; the bridge came back to nothing.
    h = Harness(tmp_path)
    sid = blank_turn_decided(h, write_fails=True, ticks_before_close=5)
    [injection] = h.store.injections(sid)
    assert injection.state == "intent"
    hello(h, {sid: IDLE}, conn="b2")
    h.bridge.alive.add("b2")
    h.advance(1)
    assert [(c, p.session_id) for c, p in h.bridge.sent if p in h.prompts()] == [("b2", sid)]


def test_a_continuation_whose_owner_never_closes_fails_after_the_owner_grace(tmp_path):
    h = Harness(tmp_path)
    sid = blank_turn_decided(h, write_fails=True, ticks_before_close=0)
    message = protocol.Hello(pid=PID, directory="/work/project", sessions={sid: IDLE})
    h.loop.handle(BridgeConnected("b2", message, h.clock.now()))  # owned, its write breaks
    h.advance(1)
    assert h.store.injections(sid)[0].state == "intent"  # and b2's close never comes
    h.advance(OWNER_GRACE.total_seconds() + 1)
    [injection] = h.store.injections(sid)
    assert injection.state == "failed" and "connection broke" in (injection.error or "")


def test_a_continuation_that_breaks_on_every_connection_fails_after_a_few(tmp_path):
    h = Harness(tmp_path)
    sid = cut_under_the_send(h)  # broke on the first connection
    for conn in ("b2", "b3", "b4"):
        message = protocol.Hello(pid=PID, directory="/work/project", sessions={sid: IDLE})
        h.loop.handle(BridgeConnected(conn, message, h.clock.now()))  # every write breaks
        h.advance(1)
        h.closed(conn)
    [injection] = h.store.injections(sid)
    assert injection.state == "failed" and h.prompts() == []


def test_a_continuation_no_bridge_could_read_fails_at_once(tmp_path, monkeypatch):
    def too_long(message: object) -> bytes:
        raise protocol.ProtocolError("too_long", "1048577 bytes >= 1048576")

    monkeypatch.setattr("opencode_autoretry.daemon.actions.encode", too_long)
    h = Harness(tmp_path)
    sid = blank_reply_written(h)
    h.idle(sid)
    [injection] = h.store.injections(sid)
    assert injection.state == "failed" and "too long" in (injection.error or "")
    assert h.prompts() == []


def sent_into_a_cut(h: Harness) -> tuple[str, protocol.Prompt]:
    """Found by the short soak: the write succeeds and the bridge never reads the line."""
    sid = blank_turn_decided(h, write_fails=False)
    [prompt] = h.prompts()
    [injection] = h.store.injections(sid)
    assert injection.state == "sent"
    return sid, prompt


def prompts_to(h: Harness, conn: str) -> list[protocol.Prompt]:
    return [p for c, p in h.bridge.sent if c == conn and isinstance(p, protocol.Prompt)]


def test_a_continuation_whose_line_a_cut_lost_goes_out_again_after_the_hello(tmp_path):
    h = Harness(tmp_path)
    sid, first = sent_into_a_cut(h)
    hello_with(h, {sid: IDLE}, {}, conn="b2")  # the bridge ran nothing
    h.advance(1)
    [again] = prompts_to(h, "b2")
    assert again.marker == first.marker  # the same injection: one decision, one continuation
    assert [d.action for d in h.store.decisions(sid)] == ["inject"]
    h.chat(sid, "msg_c", again.text, marker=dict(again.marker or {}))
    assert h.store.injections(sid)[0].state == "confirmed"


@pytest.mark.parametrize("ran", ["it", None], ids=["only-the-ack-was-lost", "older-bridge"])
def test_a_continuation_is_not_sent_again_if_it_ran_or_its_bridge_cannot_say(tmp_path, ran):
    h = Harness(tmp_path)
    sid, first = sent_into_a_cut(h)
    prompts = {(first.marker or {})["injection"]: sid} if ran else None
    hello_with(h, {sid: IDLE}, prompts, conn="b2")
    h.advance(1)
    assert prompts_to(h, "b2") == []
    assert h.store.injections(sid)[0].state == "sent"  # confirmed by its row, or failed later


def test_the_same_injection_id_run_for_another_session_is_another_stores(tmp_path):
    """A process that outlived a store made anew (a wiped state directory) ran an injection of
    the same number for another session: this store's continuation is still lost, and goes
    out again (the bridge runs it: books.js claims per session)."""
    h = Harness(tmp_path)
    sid, first = sent_into_a_cut(h)
    hello_with(h, {sid: IDLE}, {(first.marker or {})["injection"]: "ses_of_an_older_store"},
               conn="b2")
    h.advance(1)
    [again] = prompts_to(h, "b2")
    assert again.marker == first.marker


def test_a_lost_continuation_waits_while_the_session_is_busy_and_is_not_sent_when_switched_off(
        tmp_path):
    h = Harness(tmp_path)
    sid, _ = sent_into_a_cut(h)
    hello_with(h, {sid: {"status": "busy"}}, {}, conn="b2")
    h.advance(1)
    assert prompts_to(h, "b2") == []  # the user may be typing into it: wait for idle
    h.command(sid, "off")  # ... and the user switched autoretry off meanwhile
    h.idle(sid)
    h.advance(1)
    assert prompts_to(h, "b2") == []
    assert h.store.injections(sid)[0].state == "cancelled"


def test_a_continuation_lost_to_a_daemon_killed_under_the_write_goes_out_once(tmp_path):
    h = Harness(tmp_path)
    sid, first = sent_into_a_cut(h)
    h.loop.beat(h.clock.now())
    h.sigkill()
    h.revive()
    hello_with(h, {sid: IDLE}, {}, conn="b2")
    h.advance(1)
    [again] = prompts_to(h, "b2")
    assert again.marker == first.marker
    for conn in ("b3", "b4"):  # later reconnects: it ran there now, so never again
        h.closed(h.loop.sessions.ensure(sid).owner or "b2")
        hello_with(h, {sid: IDLE}, {(again.marker or {})["injection"]: sid}, conn=conn)
        h.advance(1)
    assert len(h.prompts()) == 1


def hello_with(h: Harness, sessions: dict[str, dict[str, Any]], prompts: dict[str, str] | None,
               conn: str) -> None:
    h.bridge.alive.add(conn)
    message = protocol.Hello(pid=PID, directory="/work/project", sessions=sessions,
                             prompts=prompts)
    h.loop.handle(BridgeConnected(conn, message, h.clock.now()))


def test_a_continuation_the_gap_review_sends_after_the_hello_is_not_taken_for_lost(tmp_path):
    """Found by the short soak: the hello's own gap review decided and sent a continuation,
    which the hello could not list yet; it was marked lost (the bridge refused the copy)."""
    h = Harness(tmp_path)
    sid, _ = created_just_before_a_kill(h)
    h.revive()
    h.advance(1)
    hello_with(h, {sid: IDLE}, {}, conn=CONN)
    h.advance(1)
    assert [p.session_id for p in h.prompts()] == [sid]
    assert [i.state for i in h.store.injections(sid)] == ["sent"]


def stalled_and_aborted(h: Harness) -> tuple[str, str]:
    """A stall the daemon aborts to continue it: (session, user message)."""
    hello(h, {})
    sid, user = h.busy_turn()
    h.rows.assistant(sid, user, finish=None, text="", completed=False)
    h.rows.commit()
    h.advance(h.settings.stall_timeout + 1)
    assert len(h.bridge.of(protocol.Abort)) == 1
    return sid, user


@pytest.mark.parametrize("gap", ["socket cut", "daemon killed"])
def test_our_own_abort_that_ended_in_a_gap_is_no_user_abort(tmp_path, gap):
    """Found by the long soak: a stall (there: a runaway loop) was aborted to be continued;
    the socket was cut before the abort's idle came, and the hello's gap review took the
    aborted step for the user's abort, cancelling the continuation."""
    h = Harness(tmp_path)
    sid, user = stalled_and_aborted(h)
    if gap == "socket cut":
        h.closed()  # the abort's error and idle never reach the daemon
    else:
        h.sigkill()
        h.revive()
    h.rows.assistant(sid, user, finish=None, text="", error=aborted_error())
    h.rows.commit()
    hello(h, {sid: IDLE})
    h.advance(1)
    assert [d.kind for d in h.store.decisions(sid)] == ["stall"]  # no "user aborted"
    assert [p.session_id for p in h.prompts()] == [sid]
    assert not h.store.ledgers(sid)[0].user_aborted


def test_a_users_abort_after_our_continuation_ran_stays_the_users(tmp_path):
    """The negative: later in the same turn (our continuation ran, the model works on) the
    user aborts while the socket is cut: that abort is the user's, nothing is sent."""
    h = Harness(tmp_path)
    sid, user = stalled_and_aborted(h)
    h.error_then_idle(sid, aborted_error())  # our abort went through; the continuation goes
    [prompt] = h.prompts()
    h.injected_row(sid, prompt)
    h.chat(sid, "msg_cont", prompt.text, marker=dict(prompt.marker or {}))
    h.status(sid, "busy")
    h.advance(60)  # the model works on the continuation for a minute
    h.closed()
    h.rows.assistant(sid, user, finish=None, text="", error=aborted_error())
    h.rows.commit()
    hello(h, {sid: IDLE})
    h.advance(1)
    assert [d.kind for d in h.store.decisions(sid)] == ["stall", "user_abort"]
    assert len(h.prompts()) == 1


def test_a_stall_whose_silence_spans_a_socket_cut_is_still_found(tmp_path):
    """Found by the 1.17 soak in a two-worker run: the stream went silent, the socket was cut
    and healed, and no stall was ever decided (OpenCode ended the turn itself 30 s later)."""
    h = Harness(tmp_path)
    hello(h, {})
    sid, user = h.busy_turn()
    h.rows.assistant(sid, user, finish=None, text="", completed=False)
    h.rows.commit()
    h.advance(2)
    h.closed()
    h.advance(1)
    hello(h, {sid: {"status": "busy"}}, conn="b2")
    h.advance(h.settings.stall_timeout - 1)
    assert h.bridge.of(protocol.Abort) == []  # the clock started again at the hello
    h.advance(2)
    assert len(h.bridge.of(protocol.Abort)) == 1
    assert [d.kind for d in h.store.decisions(sid)] == ["stall"]
