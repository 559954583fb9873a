"""End to end, issue 6: loops in a real OpenCode 1.18.33 stream are found from the bridge's
events, stopped, kept out of the model's next context, and followed by a reminder.

First through the bridge alone: the stand-in (real ``BridgeServer``) plus a ``RepetitionWatch``
fed with every event the bridge forwards, doing what the daemon does on a ``LoopFound``
(abort, ``trim``, reminder). Then through the real daemon (``autoretry run``): remind ->
replan -> stop, a clean answer after the reminder, and trims that survive restarts of both the
daemon and OpenCode. The provider streams its loops one word every few ms (``fake_loops.py``),
so how far a loop got before it was stopped is measured.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

import pytest
from daemon_process import DaemonProcess, wait_until
from fake_loops import HOLD_AFTER_WORDS, LoopLog, install
from fake_provider import NORMAL_TEXT, REPEATED

from opencode_autoretry.daemon.intake.bridges import BridgeMessage
from opencode_autoretry.daemon.repetition.watch import REASONING, TEXT, LoopFound, RepetitionWatch
from opencode_autoretry.decisions.policy import DEFAULT_MESSAGES
from opencode_autoretry.plugin_bridge.protocol import Abort, Config, Event, Prompt
from opencode_autoretry.repetition.guard import TRIM_NOTICE

pytestmark = [pytest.mark.e2e, pytest.mark.shared_opencode]

TURN_TIMEOUT = 30.0
REMINDER = DEFAULT_MESSAGES["repetition_remind"]
#: "Within a few hundred repeated tokens": the fake streams one word (~1.3 tokens) per chunk
#: and pauses at this many until the client hangs up (fake_loops), so the bound holds however
#: slow the abort is, and fails (the answer completes) only if the detector needs more.
MAX_WORDS_BEFORE_STOP = HOLD_AFTER_WORDS


@pytest.fixture
def loops(provider) -> LoopLog:
    return install(provider)


def _find_loop(standin, session: str, timeout: float = TURN_TIMEOUT) -> LoopFound:
    """Feed the bridge's events to a watch, in order, until it reports a loop."""
    watch = RepetitionWatch()
    found: list[LoopFound] = []

    def feed(item: Any) -> bool:
        message = getattr(item, "message", None)
        mine = isinstance(message, Event) and message.session_id == session
        if isinstance(item, BridgeMessage) and mine:
            hit = watch.on_event(message.event_type, session, message.properties)
            if hit is not None:
                found.append(hit)
        return bool(found)

    standin.wait_for(feed, timeout, "a loop found from the bridge's events")
    return found[0]


def _stop_and_remind(standin, found: LoopFound) -> None:
    """What the daemon does for a live loop: abort, trim, then the reminder."""
    aborted = standin.request(Abort(id=standin.next_id(), session_id=found.session_id))
    assert aborted.ok, aborted.error
    trim = found.trim()
    assert trim is not None
    trimmed = standin.request(replace(trim, id=standin.next_id()))
    assert trimmed.ok, trimmed.error
    marker = {"decision": "1", "injection": "1", "kind": "repetition"}
    prompted = standin.request(
        Prompt(id=standin.next_id(), session_id=found.session_id, text=REMINDER, marker=marker)
    )
    assert prompted.ok, prompted.error


def _wait_clean_answer(server: Any, session: str) -> None:
    """The first idle is the abort's: wait for the reminder's answer to complete instead."""
    server.events.wait_for(
        lambda e: (
            e.get("type") == "message.updated"
            and e["properties"]["info"].get("sessionID") == session
            and e["properties"]["info"].get("role") == "assistant"
            and e["properties"]["info"].get("finish") == "stop"
            and (e["properties"]["info"].get("time") or {}).get("completed") is not None
        ),
        TURN_TIMEOUT,
        f"a finished answer in {session}",
    )


def _assistant_text_sent(request: Any) -> list[str]:
    return [
        m["content"] if isinstance(m.get("content"), str) else str(m.get("content"))
        for m in request.messages
        if m.get("role") == "assistant"
    ]


def test_only_the_plugin_file_is_loaded_as_a_plugin(provider, standin, start_opencode):
    server = start_opencode()
    config = server.ok("GET", "/config")
    plugins = [p for p in config.get("plugin", []) if "autoretry" in str(p)]
    assert len(plugins) == 1 and str(plugins[0]).endswith("/plugins/autoretry.js"), plugins
    server.ok("GET", "/path")
    standin.wait_connected()  # and it loads: its helper modules were found


def test_a_text_loop_is_stopped_trimmed_from_history_and_reminded(
    provider, loops, standin, start_opencode
):
    server = start_opencode()
    session = server.create_session()["id"]
    standin.wait_connected()
    provider.script(["loop:400", "normal"])

    server.prompt_async(session, "Tell me something")
    found = _find_loop(standin, session)
    _stop_and_remind(standin, found)

    streamed = loops.wait_for(1, TURN_TIMEOUT)[0]
    assert not streamed.completed, "the stream was cut, not run to its end"
    assert streamed.words <= MAX_WORDS_BEFORE_STOP, f"{streamed.words} words before the stop"
    assert found.channel == TEXT and found.excerpt.strip() in REPEATED
    requests = provider.wait_for_requests(2, TURN_TIMEOUT)
    _wait_clean_answer(server, session)

    history = _assistant_text_sent(requests[1])
    looped = [h for h in history if REPEATED.strip() in h]
    assert looped, f"the aborted answer is part of the next context: {history}"
    assert TRIM_NOTICE in looped[0] and looped[0].count(REPEATED.strip()) <= 2, looped[0]
    assert requests[1].last_user_text.startswith(REMINDER)

    messages = server.messages(session)
    stored = "".join(
        p.get("text", "") for m in messages for p in m["parts"] if p.get("id") == found.part_id
    )
    assert stored.count(REPEATED.strip()) > 2 and TRIM_NOTICE not in stored, (
        "OpenCode's DB (what the TUI shows) keeps the full text"
    )
    last = messages[-1]
    assert last["info"]["finish"] == "stop"
    answer = "".join(p.get("text", "") for p in last["parts"] if p.get("type") == "text")
    assert answer.strip() == NORMAL_TEXT.strip(), "the next answer is clean"


def test_a_thinking_only_loop_is_caught_the_same_way(provider, loops, standin, start_opencode):
    server = start_opencode()
    session = server.create_session()["id"]
    standin.wait_connected()
    provider.script(["thinkloop:400", "normal"])

    server.prompt_async(session, "Think hard")
    found = _find_loop(standin, session)
    _stop_and_remind(standin, found)

    assert found.channel == REASONING
    streamed = loops.wait_for(1, TURN_TIMEOUT)[0]
    assert not streamed.completed
    assert streamed.words <= MAX_WORDS_BEFORE_STOP, f"{streamed.words} words before the stop"
    requests = provider.wait_for_requests(2, TURN_TIMEOUT)
    _wait_clean_answer(server, session)
    assert all(REPEATED.strip() not in h or TRIM_NOTICE in h for h in _assistant_text_sent(
        requests[1])), "no untrimmed loop reaches the model"
    assert server.messages(session)[-1]["info"]["finish"] == "stop"


@pytest.mark.own_opencode  # starts OpenCode itself
def test_a_trim_resent_after_an_opencode_restart_still_applies(
    provider, loops, standin, start_opencode
):
    server = start_opencode()
    session = server.create_session()["id"]
    standin.wait_connected()
    provider.script(["loop:400"])
    server.prompt_async(session, "Tell me something")
    found = _find_loop(standin, session)
    assert standin.request(Abort(id=standin.next_id(), session_id=session)).ok
    loops.wait_for(1, TURN_TIMEOUT)
    server.wait_idle(session, TURN_TIMEOUT)
    server.stop()

    restarted = start_opencode()
    restarted.ok("GET", "/path")
    standin.wait_connected(after=1)
    trim = found.trim()
    assert trim is not None
    # The daemon re-sends its stored trims on every hello (Store.trims()).
    assert standin.request(replace(trim, id=standin.next_id())).ok
    provider.script(["normal"])
    restarted.prompt_async(session, "Go on")
    request = provider.wait_for_requests(2, TURN_TIMEOUT)[1]
    _wait_clean_answer(restarted, session)
    looped = [h for h in _assistant_text_sent(request) if REPEATED.strip() in h]
    assert looped and TRIM_NOTICE in looped[0], looped
    assert len(re.findall(re.escape(REPEATED.strip()), looped[0])) <= 2


def test_penalties_from_the_daemon_reach_the_provider_and_are_off_by_default(
    provider, standin, start_opencode
):
    server = start_opencode()
    session = server.create_session()["id"]
    standin.wait_connected()
    provider.script(["normal", "normal"])

    server.prompt_async(session, "First")
    first = provider.wait_for_requests(1, TURN_TIMEOUT)[0]
    _wait_clean_answer(server, session)
    penalties = {"fake": {"frequency_penalty": 0.3, "presence_penalty": 0.2}}
    assert standin.request(Config(id=standin.next_id(), penalties=penalties)).ok
    server.prompt_async(session, "Second")
    second = provider.wait_for_requests(2, TURN_TIMEOUT)[1]

    assert "frequency_penalty" not in first.body and "presence_penalty" not in first.body
    assert (second.body.get("frequency_penalty"), second.body.get("presence_penalty")) == (
        0.3, 0.2
    ), "chat.params options pass through an OpenAI-compatible provider into the request body"


# -- through the real daemon (``autoretry run``): the loop wires RepetitionGuard -------------


def _connect(start_opencode, d: DaemonProcess):
    mark = len(d.lines())
    server = start_opencode()
    server.ok("GET", "/path")  # boots the instance, which loads the bridge
    d.wait_log("connected: pid", TURN_TIMEOUT, after=d.started_line if server.shared else mark)
    return server


def _store(d: DaemonProcess, read):
    view = d.store()
    try:
        return read(view)
    finally:
        view.close()


def _wait_store(d: DaemonProcess, read, what: str):
    """Poll the daemon's store (another process: nothing to wait on instead)."""
    return wait_until(lambda: _store(d, read), TURN_TIMEOUT, what)


def _untrimmed(request: Any) -> list[str]:
    return [h for h in _assistant_text_sent(request)
            if h.count(REPEATED.strip()) > 2 and TRIM_NOTICE not in h]


def test_daemon_remind_replan_stop_with_every_loop_cut_short_and_trimmed(
    provider, loops, daemon, start_opencode
):
    d = daemon()
    server = _connect(start_opencode, d)
    provider.script(["loop:400", "loop:400", "loop:400"])
    session = server.create_session()["id"]
    server.prompt_async(session, "Tell me something")

    streamed = loops.wait_for(3, 3 * TURN_TIMEOUT)
    assert [s.completed for s in streamed] == [False] * 3, streamed
    assert max(s.words for s in streamed) <= MAX_WORDS_BEFORE_STOP, streamed
    decided = _wait_store(d, lambda v: len(v.decisions(session)) >= 3 and v.decisions(session),
                          "three decisions")
    assert [(x.kind, x.action) for x in decided] == [
        ("repetition", "abort_then_inject"), ("repetition", "abort_then_inject"),
        ("repetition", "notify"),
    ]
    requests = provider.requests()
    assert [r.last_user_text.split("\n")[0] for r in requests[1:3]] == [
        REMINDER, DEFAULT_MESSAGES["repetition_replan"]
    ]
    assert all(not _untrimmed(r) for r in requests), "no loop ever reaches the model again"
    # The trim is written right after its decision, in the same loop step: wait for it too.
    trims = _wait_store(d, lambda v: len(v.trims(session)) >= 3 and v.trims(session),
                        "three trims")
    assert len(trims) == 3 and [t.decision_id for t in trims] == [x.id for x in decided]
    server.events.wait_for(
        lambda e: e.get("type") == "tui.toast.show"
        and "waiting for you" in e["properties"].get("message", ""),
        TURN_TIMEOUT, "the out-of-budget toast",
    )
    assert len(provider.requests()) == 3, "stopped for good: no fourth request"


@pytest.mark.own_opencode  # starts OpenCode itself
def test_daemon_reminder_gets_a_clean_answer_and_trims_survive_restarts(
    provider, loops, daemon, start_opencode
):
    d = daemon()
    server = _connect(start_opencode, d)
    provider.script(["thinkloop:400", "loop:400", "normal"])
    session = server.create_session()["id"]
    server.prompt_async(session, "Think, then tell me")

    _wait_clean_answer(server, session)
    streamed = loops.wait_for(2, TURN_TIMEOUT)
    assert [s.completed for s in streamed] == [False, False]
    assert [x.action for x in _store(d, lambda v: v.decisions(session))] == [
        "abort_then_inject", "abort_then_inject"
    ]
    answer = server.messages(session)[-1]
    assert "".join(p.get("text", "") for p in answer["parts"] if p["type"] == "text").strip() \
        == NORMAL_TEXT.strip(), "the next answer is clean"

    # Both restarts at once: a new daemon process and a new OpenCode process.
    d.stop()
    server.stop()
    d2 = daemon()
    server2 = _connect(start_opencode, d2)
    provider.script(["normal"])
    server2.prompt_async(session, "And now?")
    request = provider.wait_for_requests(4, TURN_TIMEOUT)[3]
    assert TRIM_NOTICE in " ".join(_assistant_text_sent(request)), _assistant_text_sent(request)
    assert not _untrimmed(request), "the trims were re-sent to the new bridge on hello"
