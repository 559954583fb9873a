"""daemon/repetition/guard.py over the loop's real parts (actions, store, decision core) and a
row-written OpenCode DB: remind -> replan -> stop for live loops, inject-only for cross-step
loops, trims recorded and re-sent on hello, penalties config."""

from __future__ import annotations

from dataclasses import replace

import pytest
from daemon_fakes import CONN, Harness

from opencode_autoretry.config.load import parse_config
from opencode_autoretry.config.settings import SettingsError
from opencode_autoretry.daemon.repetition.guard import RepetitionGuard
from opencode_autoretry.daemon.repetition.watch import RepetitionWatch
from opencode_autoretry.decisions.policy import DEFAULT_MESSAGES
from opencode_autoretry.models import Action
from opencode_autoretry.plugin_bridge import protocol
from opencode_autoretry.repetition.penalties import load_penalties

LOOP = "The same sentence comes again and again. "
PROSE = "Here is what I found in the repository, step by step, before the trouble began. "


def guard_for(h: Harness, penalties: dict | None = None) -> RepetitionGuard:
    loop = h.loop
    return RepetitionGuard(
        RepetitionWatch(), h.store, loop.actions, loop.sessions, loop.db, loop._decide,
        h.bridge, penalties=penalties,
    )


def busy_turn(h: Harness) -> tuple[str, str]:
    h.hello()
    sid, user = h.busy_turn()
    return sid, user


def stream_loop(h: Harness, guard: RepetitionGuard, sid: str, user: str, n: int, kind="text"):
    """One streaming step (row written unfinished, as OpenCode has it) that loops."""
    step = h.rows.assistant(sid, user, finish=None, text="", completed=False)
    h.rows.commit()
    view = h.loop.sessions.ensure(sid)
    part_id = f"prt_loop{n}"
    decisions = []
    guard.on_event(view, "message.part.updated", {"part": {
        "id": part_id, "messageID": step, "sessionID": sid, "type": kind, "time": {"start": 1},
    }}, h.clock.now())
    text = PROSE + LOOP * 60
    for i in range(0, len(text), 40):
        props = {"sessionID": sid, "messageID": step, "partID": part_id, "field": "text",
                 "delta": text[i : i + 40]}
        decision = guard.on_event(view, "message.part.delta", props, h.clock.now())
        if decision is not None:
            decisions.append(decision)
    return step, part_id, decisions


def deliver_after_abort(h: Harness, sid: str) -> protocol.Prompt:
    """OpenCode after our abort: idle; the loop sends the reminder, OpenCode saves it (with
    its marker) and starts working on it."""
    h.idle(sid)
    prompt = h.prompts()[-1]
    h.injected_row(sid, prompt)
    h.chat(sid, None, prompt.text, marker=dict(prompt.marker or {}))
    h.status(sid, "busy")
    return prompt


def test_live_loops_remind_then_replan_then_stop_for_good_each_trimmed(tmp_path):
    h = Harness(tmp_path)
    guard = guard_for(h)
    sid, user = busy_turn(h)

    actions, texts = [], []
    for n in range(3):
        step, part_id, decisions = stream_loop(h, guard, sid, user, n)
        assert len(decisions) == 1, "one decision per looping stream"
        actions.append(decisions[0].action)
        texts.append(decisions[0].text)
        if decisions[0].sends:
            deliver_after_abort(h, sid)

    assert actions == [Action.ABORT_THEN_INJECT, Action.ABORT_THEN_INJECT, Action.NOTIFY]
    assert texts[:2] == [DEFAULT_MESSAGES["repetition_remind"],
                         DEFAULT_MESSAGES["repetition_replan"]]
    assert [p.text for p in h.prompts()] == texts[:2], "each reminder sent after its abort"
    assert len(h.bridge.of(protocol.Abort)) == 3, "the third loop is stopped without a budget"
    trims = h.bridge.of(protocol.Trim)
    assert [t.part_id for t in trims] == ["prt_loop0", "prt_loop1", "prt_loop2"]
    text = PROSE + LOOP * 60
    for trim in trims:  # keep = loop start + one period (the run may begin a few chars early)
        assert trim.excerpt is not None and len(trim.excerpt) == len(LOOP)
        assert text[: trim.keep_chars].endswith(trim.excerpt)
        assert len(PROSE) - len(LOOP) < trim.keep_chars - len(LOOP) <= len(PROSE)
    stored = h.store.trims(session_id=sid)
    assert [r.part_id for r in stored] == ["prt_loop0", "prt_loop1", "prt_loop2"]
    decisions = h.store.decisions(session_id=sid)
    assert [r.id for r in decisions] == [r.decision_id for r in stored]
    assert [d.kind for d in decisions] == ["repetition"] * 3
    assert any("waiting for you" in t for t in h.toasts()), h.toasts()


def test_a_reasoning_loop_is_handled_like_a_text_loop(tmp_path):
    h = Harness(tmp_path)
    guard = guard_for(h)
    sid, user = busy_turn(h)
    _, part_id, decisions = stream_loop(h, guard, sid, user, 0, kind="reasoning")
    assert [d.action for d in decisions] == [Action.ABORT_THEN_INJECT]
    assert "reasoning stream" in decisions[0].reason
    assert [t.part_id for t in h.bridge.of(protocol.Trim)] == [part_id]


def test_with_autoretry_off_a_loop_is_neither_stopped_nor_trimmed(tmp_path):
    h = Harness(tmp_path)
    guard = guard_for(h)
    sid, user = busy_turn(h)
    h.store.set_enabled(False, h.clock.now(), sid)
    _, _, decisions = stream_loop(h, guard, sid, user, 0)
    assert [d.action for d in decisions] == [Action.SKIP]
    assert h.bridge.of(protocol.Abort) == [] and h.bridge.of(protocol.Trim) == []
    assert h.store.trims() == []


def looping_steps(h: Harness, guard: RepetitionGuard, sid: str, user: str, count: int):
    view = h.loop.sessions.ensure(sid)
    decisions = []
    for n in range(count):
        step = h.rows.assistant(sid, user, finish="tool-calls", text="Let me check again.")
        h.rows.commit()
        events = [
            ("message.part.updated", {"part": {
                "id": f"prt_t{n}", "messageID": step, "sessionID": sid, "type": "text",
                "text": "Let me check again.", "time": {"start": 1, "end": 2}}}),
            ("message.part.updated", {"part": {
                "id": f"prt_x{n}", "messageID": step, "sessionID": sid, "type": "tool",
                "tool": "bash", "state": {"status": "completed", "input": {"command": "ls"}}}}),
            ("message.updated", {"info": {
                "id": step, "sessionID": sid, "role": "assistant", "finish": "tool-calls"}}),
        ]
        for kind, props in events:
            decision = guard.on_event(view, kind, props, h.clock.now())
            if decision is not None:
                decisions.append(decision)
    return decisions


def test_a_cross_step_loop_is_reminded_at_once_without_an_abort_or_a_trim(tmp_path):
    h = Harness(tmp_path)
    guard = guard_for(h)
    sid, user = busy_turn(h)

    decisions = looping_steps(h, guard, sid, user, 3)

    assert [d.action for d in decisions] == [Action.INJECT]
    assert decisions[0].text == DEFAULT_MESSAGES["repetition_remind"]
    assert h.loop.sessions.ensure(sid).busy, "still busy: OpenCode queues the prompt"
    prompts = h.prompts()
    assert [p.text for p in prompts] == [DEFAULT_MESSAGES["repetition_remind"]]
    assert prompts[0].marker is not None and prompts[0].marker["kind"] == "repetition"
    assert h.bridge.of(protocol.Abort) == [] and h.bridge.of(protocol.Trim) == []


def test_hello_gets_the_penalties_and_the_recent_trims(tmp_path):
    h = Harness(tmp_path)
    guard = guard_for(h, penalties={"fake": {"frequency_penalty": 0.3}})
    now = h.clock.now()
    h.store.record_trim("ses_old", "msg_o", "prt_o", 10, now.replace(year=now.year - 1))
    h.store.record_trim("ses_a", "msg_a", "prt_a", 42, now, excerpt="again. ")

    sent = guard.on_hello(CONN, now)

    assert sent == 1
    assert h.bridge.of(protocol.Config) == [
        protocol.Config(penalties={"fake": {"frequency_penalty": 0.3}})
    ]
    assert h.bridge.of(protocol.Trim) == [
        protocol.Trim("ses_a", "msg_a", "prt_a", 42, excerpt="again. ")
    ]


def test_the_loop_gives_the_guard_the_penalties_of_the_config(tmp_path):
    h = Harness(tmp_path, repetition={"penalties": {"p": {"presence_penalty": 1}}})
    guard = h.loop.repetition
    assert guard.penalties == {"p": {"presence_penalty": 1.0}}
    bad = replace(h.settings, repetition={"penalties": {"p": {"x": 1}}})
    with pytest.raises(SettingsError):  # refused where the config is parsed, before any loop
        parse_config(bad)


def test_hello_without_penalties_sends_no_config(tmp_path):
    h = Harness(tmp_path)
    assert guard_for(h).on_hello(CONN, h.clock.now()) == 0
    assert h.bridge.of(protocol.Config) == []


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({}, {}),
        ({"penalties": {}}, {}),
        (
            {"penalties": {"fake": {"frequency_penalty": 0.3, "presence_penalty": -1},
                           "*": {"repetition_penalty": 1.1}}},
            {"fake": {"frequency_penalty": 0.3, "presence_penalty": -1.0},
             "*": {"repetition_penalty": 1.1}},
        ),
    ],
)
def test_load_penalties(raw, expected):
    assert load_penalties(raw) == expected


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        ({"penalties": {"fake": {"frequency_penalty": 3}}}, "from -2 to 2"),
        ({"penalties": {"fake": {"frequency_penalty": True}}}, "must be a number"),
        ({"penalties": {"fake": {"temperature": 0.1}}}, "unknown key 'temperature'"),
        ({"penalties": {"fake": 0.3}}, "repetition.penalties.fake must be a table"),
        ({"penalties": [1]}, "must be a table of provider tables"),
        ({"penalty": {}}, "unknown key(s) penalty"),
    ],
)
def test_load_penalties_names_the_bad_key(raw, needle):
    with pytest.raises(SettingsError) as info:
        load_penalties(raw)
    assert needle in str(info.value)


def test_the_loop_routes_bridge_events_to_the_guard_and_trims_to_a_new_bridge(tmp_path):
    h = Harness(tmp_path)
    sid, user = busy_turn(h)
    step = h.rows.assistant(sid, user, finish=None, text="", completed=False)
    h.rows.commit()
    h.event("message.part.updated", sessionID=sid, part={
        "id": "prt_1", "messageID": step, "sessionID": sid, "type": "text", "time": {"start": 1}})
    text = PROSE + LOOP * 60
    for i in range(0, len(text), 40):
        h.event("message.part.delta", sessionID=sid, messageID=step, partID="prt_1",
                field="text", delta=text[i : i + 40])

    assert [(d.kind, d.action) for d in h.store.decisions(sid)] == [
        ("repetition", "abort_then_inject")
    ]
    assert [a.session_id for a in h.bridge.of(protocol.Abort)] == [sid]
    assert [t.part_id for t in h.bridge.of(protocol.Trim)] == ["prt_1"]

    h.bridge.alive.add("b2")
    h.hello(conn="b2", pid=777)  # e.g. OpenCode restarted: its new bridge gets the trim
    assert [(c, m.part_id) for c, m in h.bridge.sent if isinstance(m, protocol.Trim)] == [
        (CONN, "prt_1"), ("b2", "prt_1")
    ]
