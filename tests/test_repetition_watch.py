"""daemon/repetition/watch.py (live and cross-step loops from bridge events), the trim it
produces (protocol), and the store's trims table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from opencode_autoretry.daemon.repetition.watch import (
    REASONING,
    STEPS,
    TEXT,
    LoopFound,
    RepetitionWatch,
)
from opencode_autoretry.models import Kind
from opencode_autoretry.plugin_bridge import protocol
from opencode_autoretry.plugin_bridge.protocol import Config, Trim
from opencode_autoretry.repetition.guard import StepSummary
from opencode_autoretry.store.database import Store, StoreView

SES = "ses_a"
LOOP = "The same sentence comes again and again. "
PROSE = (
    "Autoretry watches OpenCode sessions and continues them when a turn ends badly. "
    "It reads the database read-only, listens to the bridge, and decides per turn. "
    "Budgets are counted per group, deadlines start at the first failure, and nothing "
    "is sent to a child session. A real user message opens a new ledger. "
)
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def chunks(text: str, size: int = 40) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def delta(part_id: str, text: str, message_id: str = "msg_1") -> tuple[str, dict]:
    return "message.part.delta", {
        "sessionID": SES, "messageID": message_id, "partID": part_id, "field": "text",
        "delta": text,
    }


def part(part_id: str, kind: str, text: str = "", end: bool = False, message_id: str = "msg_1"):
    time = {"start": 1, "end": 2} if end else {"start": 1}
    return "message.part.updated", {"sessionID": SES, "part": {
        "id": part_id, "messageID": message_id, "sessionID": SES, "type": kind, "text": text,
        "time": time,
    }}


def tool(part_id: str, message_id: str, args: dict, status: str = "completed"):
    return "message.part.updated", {"sessionID": SES, "part": {
        "id": part_id, "messageID": message_id, "sessionID": SES, "type": "tool",
        "tool": "bash", "state": {"status": status, "input": args},
    }}


def finished(message_id: str, finish: str = "stop", error: dict | None = None):
    info = {"id": message_id, "sessionID": SES, "role": "assistant", "finish": finish}
    if error is not None:
        info["error"] = error
    return "message.updated", {"sessionID": SES, "info": info}


def run(watch: RepetitionWatch, events: list[tuple[str, dict]]) -> list[LoopFound]:
    found = []
    for kind, props in events:
        hit = watch.on_event(kind, SES, props)
        if hit is not None:
            found.append(hit)
    return found


def streamed(part_id: str, kind: str, text: str, message_id: str = "msg_1") -> list:
    return [
        part(part_id, kind, message_id=message_id),
        *(delta(part_id, c, message_id) for c in chunks(text)),
        part(part_id, kind, text, end=True, message_id=message_id),
    ]


# -- live loops ---------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "channel"), [("text", TEXT), ("reasoning", REASONING)])
def test_a_looping_stream_is_found_live_once_on_its_channel(kind, channel):
    watch = RepetitionWatch()
    text = PROSE + LOOP * 400
    events = [part("prt_1", kind), *(delta("prt_1", c) for c in chunks(text))]
    found = run(watch, events)
    assert len(found) == 1, "one report per stream, however long the loop goes on"
    hit = found[0]
    assert (hit.session_id, hit.message_id, hit.part_id, hit.channel) == (
        SES, "msg_1", "prt_1", channel
    )
    assert hit.live and hit.excerpt in LOOP * 2
    assert text[: hit.keep_chars].endswith(hit.excerpt), "keep = loop start + one period"
    assert hit.keep_chars <= len(PROSE) + 2 * len(LOOP)


def test_the_loop_is_caught_within_a_few_hundred_repeated_chars():
    watch = RepetitionWatch()
    fed = 0
    for piece in chunks(PROSE + LOOP * 400):
        fed += len(piece)
        if watch.on_event(delta("prt_1", piece)[0], SES, delta("prt_1", piece)[1]) is not None:
            break
    else:
        pytest.fail("loop never found")
    assert fed - len(PROSE) <= 12 * len(LOOP), f"{fed - len(PROSE)} looping chars fed"


def test_prose_and_tool_turns_raise_nothing():
    watch = RepetitionWatch()
    events = [
        *streamed("prt_r", "reasoning", PROSE),
        *streamed("prt_t", "text", PROSE * 2),
        tool("prt_x", "msg_1", {"command": "ls"}),
        finished("msg_1", "tool-calls"),
    ]
    assert run(watch, events) == []
    assert watch.live_streams == 0, "every stream ended with its part"


def test_streams_reset_at_part_boundaries():
    """Six copies spread over parts of two copies each never add up to a loop."""
    watch = RepetitionWatch()
    events = []
    for i in range(6):
        events += streamed(f"prt_{i}", "text", PROSE[: 40 * (i + 1)] + LOOP * 2)
    assert run(watch, events) == []


def test_a_loop_still_buffered_at_the_part_end_is_found_by_part_done():
    watch = RepetitionWatch()
    text = "go " * 30  # 90 chars: below the guard's 128-char batch, so never checked live
    events = [part("prt_1", "text"), delta("prt_1", text)]
    assert run(watch, events) == []
    hit = run(watch, [part("prt_1", "text", text, end=True)])
    assert len(hit) == 1 and hit[0].part_id == "prt_1"


def test_late_deltas_after_a_hit_or_the_part_end_are_ignored():
    watch = RepetitionWatch()
    assert run(watch, streamed("prt_1", "text", PROSE + LOOP * 40))
    assert run(watch, [delta("prt_1", LOOP * 20)]) == []
    assert watch.live_streams == 0


def test_live_streams_are_bounded_oldest_dropped_first():
    watch = RepetitionWatch(max_streams=3)
    run(watch, [delta(f"prt_{i}", PROSE[:50]) for i in range(5)])
    assert (watch.live_streams, watch.evicted) == (3, 2)
    assert run(watch, [delta("prt_0", LOOP * 30)]) == [], "an evicted stream stays closed"
    assert run(watch, [delta("prt_4", LOOP * 30)]), "a kept stream still watches"


def test_an_aborted_step_drops_its_streams():
    watch = RepetitionWatch()
    run(watch, [part("prt_1", "text"), delta("prt_1", PROSE)])
    run(watch, [finished("msg_1", "stop", error={"name": "MessageAbortedError"})])
    assert watch.live_streams == 0
    assert run(watch, [delta("prt_1", LOOP * 40)]) == []


def test_forget_drops_a_session():
    watch = RepetitionWatch()
    run(watch, [delta("prt_1", PROSE)])
    watch.forget(SES)
    assert watch.live_streams == 0


# -- cross-step loops ---------------------------------------------------------------------


def looping_step(n: int, text: str = "Let me check the file again.") -> list:
    message_id = f"msg_s{n}"
    return [
        *streamed(f"prt_t{n}", "text", text, message_id),
        tool(f"prt_x{n}", message_id, {"command": "cat a.txt"}),
        finished(message_id, "tool-calls"),
    ]


def test_three_identical_steps_are_a_cross_step_loop_without_a_trim():
    watch = RepetitionWatch()
    found = run(watch, looping_step(1) + looping_step(2) + looping_step(3))
    assert len(found) == 1
    hit = found[0]
    assert (hit.channel, hit.message_id, hit.live) == (STEPS, "msg_s3", False)
    assert hit.trim() is None, "complete steps are never cut"
    assert hit.detector == "text_loop" and hit.repeats == 3


def test_after_a_cross_step_hit_a_fresh_run_is_needed_before_the_next():
    watch = RepetitionWatch()
    events = [e for n in range(1, 7) for e in looping_step(n)]
    found = run(watch, events)
    assert [f.message_id for f in found] == ["msg_s3", "msg_s6"]


def test_steps_without_a_finish_reason_are_left_to_the_runaway_detector():
    watch = RepetitionWatch()
    events = []
    for n in range(1, 5):
        events += [*streamed(f"prt_t{n}", "text", "Hello again.", f"msg_u{n}"),
                   finished(f"msg_u{n}", "unknown")]
    assert run(watch, events) == []


def test_a_step_end_reported_twice_counts_once():
    watch = RepetitionWatch()
    events = looping_step(1) + looping_step(2) + [finished("msg_s2", "tool-calls")]
    assert run(watch, events) == []
    assert len(run(watch, looping_step(3))) == 1


def test_new_turn_forgets_the_steps_of_the_old_turn():
    watch = RepetitionWatch()
    run(watch, looping_step(1) + looping_step(2))
    watch.new_turn(SES)
    assert run(watch, looping_step(3)) == []


def test_step_end_takes_a_summary_directly():
    watch = RepetitionWatch()
    summary = StepSummary.build(reasonings=["I should read the file."])
    hits = [watch.step_end(SES, f"msg_{i}", summary) for i in range(3)]
    assert hits[:2] == [None, None]
    assert hits[2] is not None and hits[2].detector == "reasoning_loop"


# -- what the daemon builds from a LoopFound ------------------------------------------------


def test_loop_found_gives_a_retryable_repetition_verdict_and_a_trim():
    hit = LoopFound(SES, "msg_1", TEXT, "tail_period", 42, 8, "x" * 500, "prt_1", 542)
    verdict = hit.verdict()
    assert (verdict.kind, verdict.retryable, verdict.message_id) == (
        Kind.REPETITION, True, "msg_1"
    )
    assert "text stream" in verdict.reason and "x8" in verdict.reason
    trim = hit.trim()
    assert trim == Trim(SES, "msg_1", "prt_1", 542, excerpt="x" * 200)


@pytest.mark.parametrize(
    "message",
    [
        Trim(SES, "msg_1", "prt_1", 120, excerpt="again. "),
        Trim(SES, "msg_1", "prt_1", 0, id="r-3"),
        Config(penalties={"fake": {"frequency_penalty": 0.3}}),
        Config(id="r-4"),
    ],
)
def test_trim_and_config_round_trip(message):
    assert protocol.decode_from_daemon(protocol.encode(message)) == message


# -- the store's trims ----------------------------------------------------------------------


def test_trims_are_stored_replayed_per_part_and_readable_by_the_view(tmp_path):
    path = tmp_path / "store.db"
    store = Store.open(path)
    store.record_trim(SES, "msg_1", "prt_1", 100, NOW, excerpt="again", decision_id=7)
    store.record_trim("ses_b", "msg_2", "prt_2", 50, NOW + timedelta(seconds=5))
    store.record_trim(SES, "msg_1", "prt_1", 120, NOW + timedelta(seconds=9))  # a replay
    assert [(t.part_id, t.keep_chars, t.decision_id) for t in store.trims()] == [
        ("prt_2", 50, None), ("prt_1", 120, None)
    ]
    assert [t.part_id for t in store.trims(session_id="ses_b")] == ["prt_2"]
    assert [t.part_id for t in store.trims(since=NOW + timedelta(seconds=6))] == ["prt_1"]
    assert store.trims()[1].at == NOW + timedelta(seconds=9)
    store.close()
    view = StoreView.open(path)
    assert len(view.trims()) == 2
    view.close()
    assert StoreView.open(tmp_path / "missing.db").trims() == []
