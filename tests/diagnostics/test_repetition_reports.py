"""Issue 6 item 5: ``diagnose`` and ``trace`` report repetition stops; ``timeline`` marks
where the loop began. The store is written the way the daemon writes it (``loop_scenario``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from loop_scenario import LOOPING_TEXT, LoopSeed, seed_loops

from opencode_autoretry.diagnostics.records import DaemonRecords
from opencode_autoretry.diagnostics.repetition_view import RepetitionStop, repetition_stops
from opencode_autoretry.store.database import DecisionRecord, TrimRecord

AT = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture(scope="module")
def loops(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopSeed]:
    yield seed_loops(tmp_path_factory.mktemp("loops"))


@pytest.fixture()
def report(run_on, loops: LoopSeed):  # noqa: ANN201 - a callable
    def run(*args: str) -> str:
        result = run_on(loops.db, loops.store, *args)
        assert result.exit_code == 0, result.output
        return result.output

    return run


NAMES = ["remind", "replan", "stop", "cross", "pending"]


def test_diagnose_json_lists_every_repetition_stop(report, loops: LoopSeed) -> None:
    body = json.loads(report("diagnose", "0", "--json"))
    stops = body["repetition_stops"]
    assert stops["count"] == 5
    rows = stops["rows"]
    assert [r["decision_id"] for r in rows] == [loops.decisions[n] for n in NAMES]
    assert [r["taken"] for r in rows] == [
        "reminded",
        "replanned",
        "stopped",
        "reminded",
        "reminded",
    ]
    assert [r["action"] for r in rows] == [
        "abort_then_inject",
        "abort_then_inject",
        "notify",
        "inject",
        "abort_then_inject",
    ]
    assert [r["trimmed"] for r in rows] == [True, True, True, False, True]
    assert [r["keep_chars"] for r in rows] == [loops.keep.get(n) for n in NAMES]
    assert rows[0]["message_id"] == loops.steps["remind"]
    assert rows[0]["reason"].startswith("tail_period in text stream: a block of 33 chars x")
    assert rows[1]["reason"].startswith("tail_period in reasoning stream")
    assert rows[3]["reason"] == (
        'tool_repeat in consecutive steps: a block of 1 steps x3 (\'{"tool":"bash"}\')'
    )
    assert "health" in body and "kinds" in body  # the older keys are all still there


def test_diagnose_limit_keeps_the_newest_stops_and_the_full_count(report, loops) -> None:
    stops = json.loads(report("diagnose", "0", "--limit", "2", "--json"))["repetition_stops"]
    assert stops["count"] == 5
    assert [r["decision_id"] for r in stops["rows"]] == [
        loops.decisions["cross"],
        loops.decisions["pending"],
    ]


def test_diagnose_human_section(report, loops: LoopSeed) -> None:
    out = report("diagnose", "0")
    assert "Repetition stops: ⚠ 5" in out
    stop_line = next(line for line in out.splitlines() if " stopped trimmed=" in line)
    assert stop_line.startswith("  [2026-11-30 12:09:")  # local time (UTC in the tests)
    assert f"msg=…{loops.steps['stop'][-12:]}" in stop_line
    assert f"trimmed=yes (char {loops.keep['stop']})" in stop_line
    assert " replanned trimmed=yes" in out and " reminded trimmed=no" in out
    assert "      tool_repeat in consecutive steps" in out


def test_diagnose_without_loops_says_none(invoke) -> None:
    out = invoke("diagnose", "0").output
    assert "Repetition stops: ✓ none" in out
    body = json.loads(invoke("diagnose", "0", "--json").output)
    assert body["repetition_stops"] == {"count": 0, "rows": []}


def test_trace_json_outcomes_and_trims(report, loops: LoopSeed) -> None:
    body = json.loads(report("trace", "0", "--json"))
    outcomes = {s["decision_id"]: s["outcome"] for s in body["repetition_stops"]}
    d = loops.decisions
    assert outcomes[d["remind"]] == {
        "status": "looped",
        "detail": f"✗ looped again (decision #{d['replan']})",
        "message_id": loops.steps["replan"],
    }
    assert outcomes[d["replan"]]["status"] == "looped"
    assert outcomes[d["stop"]]["status"] == "stopped"
    assert outcomes[d["cross"]] == {
        "status": "clean",
        "detail": "✓ clean (no loop after the reminder)",
        "message_id": loops.steps["clean"],
    }
    assert outcomes[d["pending"]] == {
        "status": "pending",
        "detail": "… pending (sent)",
        "message_id": None,
    }
    trims = body["trims"]
    assert [t["part_id"] for t in trims] == [
        loops.parts[n] for n in ("remind", "replan", "stop", "pending")
    ]
    assert trims[0]["decision_id"] == d["remind"] and trims[0]["keep_chars"] == loops.keep["remind"]
    assert trims[0]["excerpt"] and trims[0]["excerpt"] in LOOPING_TEXT
    assert len(body["continuations"]) == 4 and len(body["declined"]) == 1  # unchanged keys


def test_trace_by_session_keeps_only_its_stops(report, loops: LoopSeed) -> None:
    body = json.loads(report("trace", "loopy-fox", "--json"))
    assert {s["session_id"] for s in body["repetition_stops"]} == {loops.session}
    assert len(body["repetition_stops"]) == 5 and len(body["trims"]) == 4


def test_trace_human_output(report, loops: LoopSeed) -> None:
    out = report("trace", "0")
    assert "Repetition stops: 5" in out
    assert f"outcome: ✗ looped again (decision #{loops.decisions['replan']})" in out
    assert "outcome: ✓ clean (no loop after the reminder)" in out
    assert "outcome: … pending (sent)" in out
    assert "outcome: ■ stopped (budget spent; waiting for the user)" in out
    assert "reason: tail_period in reasoning stream" in out
    assert "History trims: 4" in out
    assert f"kept {loops.keep['remind']} chars (decision #{loops.decisions['remind']})" in out
    assert f"a repetition reminder (decision #{loops.decisions['remind']})" in out


def test_timeline_json_marks_the_loop_start_and_lists_the_trims(report, loops) -> None:
    body = json.loads(report("timeline", "loopy-fox", "--json"))
    messages = {e["id"]: e for e in body["entries"] if e["type"] == "message"}
    looping = messages[loops.steps["remind"]]["parts"]
    text = next(p for p in looping if p["type"] == "text")
    assert text["loop_start"] == loops.keep["remind"]
    thinking = next(p for p in messages[loops.steps["replan"]]["parts"] if p["type"] == "reasoning")
    assert thinking["loop_start"] == loops.keep["replan"]
    clean = next(p for p in messages[loops.steps["clean"]]["parts"] if p["type"] == "text")
    assert "loop_start" not in clean
    trims = [e for e in body["entries"] if e["type"] == "trim"]
    assert [t["part_id"] for t in trims] == [
        loops.parts[n] for n in ("remind", "replan", "stop", "pending")
    ]
    assert trims[0]["decision_id"] == loops.decisions["remind"]
    times = [e["time"] for e in body["entries"]]
    assert times == sorted(times)


def test_timeline_human_marks_where_the_loop_began(report, loops: LoopSeed) -> None:
    lines = report("timeline", "loopy-fox").splitlines()
    marker = f"⟲ loop began here (char {loops.keep['remind']}; trimmed from the model's context)"
    at = lines.index("      " + marker)
    kept = LOOPING_TEXT[: loops.keep["remind"]]
    assert lines[at - 1].startswith('      text: "…') and lines[at - 1].endswith(kept[-40:] + '"')
    assert (
        lines[at + 1].startswith('        repeats: "') and "more chars in the TUI" in lines[at + 1]
    )
    assert sum(1 for line in lines if line.strip() == marker) == 4  # all but the cross-step loop
    assert any(line.strip().startswith("reasoning: ") for line in lines)
    assert any("TRIM part" in line and f"kept {loops.keep['stop']} chars" in line for line in lines)


def _decision(
    id_: int, action: str, used_before: int, reason: str, turn: str = "t1"
) -> DecisionRecord:
    return DecisionRecord.of_legacy(  # typed from its reason, as migration 5 types an old row
        id=id_, at=AT, session_id="ses_1", turn_id=turn, message_id=f"msg_{id_}",
        kind="repetition", action=action, reason=reason, group="repetition", text=None,
        due=None, used_before=used_before, used_after=used_before + 1, limit=2,
    )


@pytest.mark.parametrize(
    ("action", "used_before", "taken"),
    [
        ("abort_then_inject", 0, "reminded"),
        ("inject", 0, "reminded"),
        ("abort_then_inject", 1, "replanned"),
        ("notify", 2, "stopped"),
        ("skip", 0, "skipped"),
    ],
)
def test_taken_table(action: str, used_before: int, taken: str) -> None:
    stop = RepetitionStop(_decision(1, action, used_before, f"{action}: x"), None)
    assert stop.taken == taken


@pytest.mark.parametrize(
    ("reason", "detector"),
    [
        (
            "abort_then_inject: repetition (token_block in text stream: a block of 8 tokens x5 "
            "('a; b)')); repetition 1/2, in 0 s",
            "token_block in text stream: a block of 8 tokens x5 ('a; b)')",
        ),
        (
            "notify: repetition (tail_period in reasoning stream: a block of 4 chars x30 "
            '("it\'s")); retried 2 of 2 times (repetition); waiting for a real user message',
            'tail_period in reasoning stream: a block of 4 chars x30 ("it\'s")',
        ),
        ("skip: autoretry is off", "skip: autoretry is off"),  # no detector words: as written
    ],
)
def test_detector_reason_is_cut_from_the_decision_reason(reason: str, detector: str) -> None:
    assert RepetitionStop(_decision(1, "inject", 0, reason), None).detector_reason == detector


def test_trims_join_by_decision_else_by_message() -> None:
    first = _decision(1, "abort_then_inject", 0, "x")
    second = _decision(2, "abort_then_inject", 0, "x", turn="t2")
    by_id = TrimRecord(1, AT, "ses_1", "msg_9", "prt_1", 10, "ab", 1)
    orphan = TrimRecord(2, AT, "ses_1", "msg_2", "prt_2", 20, "cd", None)
    other = _decision(3, "inject", 0, "x")
    records = DaemonRecords(decisions=(first, second, other), trims=(by_id, orphan))
    found = {s.decision.id: s.trim for s in repetition_stops(records)}
    assert found == {1: by_id, 2: orphan, 3: None}
    assert repetition_stops(records, "ses_other") == ()


def test_missing_store_reads_as_no_stops(run_on, loops: LoopSeed, tmp_path: Path) -> None:
    result = run_on(loops.db, tmp_path / "none.db", "trace", "0", "--json")
    body = json.loads(result.output)
    assert body["repetition_stops"] == [] and body["trims"] == []
