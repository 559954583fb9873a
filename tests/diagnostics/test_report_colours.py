"""Colours match meaning (issue 24): "0 turns (0 %)" recovered was painted green."""

from __future__ import annotations

from opencode_autoretry.diagnostics.render import Style
from opencode_autoretry.diagnostics.summary.tally import FATES, LEFT_ALONE, Summary
from opencode_autoretry.diagnostics.summary.view import headline_lines

GREEN, RED, YELLOW = "\x1b[32m", "\x1b[31m", "\x1b[33m"
COLOUR = Style(colour=True)


def _in(colour: str, text: str) -> str:
    return COLOUR.paint(text, colour)


def _summary(failed: int = 0, sent: int = 0, **turns: int) -> Summary:
    return Summary(
        failed_steps=failed,
        failed_turns=sum(turns.values()),
        failed_sessions=1 if failed else 0,
        turns={fate: turns.get(fate, 0) for fate in FATES},
        left_alone=dict.fromkeys(LEFT_ALONE, 0),
        loops={},
        continuations={"failed": sent} if sent else {},
        decisions={},
        per_day=(),
        by_model={},
        by_kind={},
    )


def _line(summary: Summary, label: str) -> str:
    return next(line for line in headline_lines(summary, COLOUR) if label in line)


def test_no_recovered_turn_of_some_failures_is_not_green() -> None:
    line = _line(_summary(failed=3, sent=2, not_recovered=3), "Recovered:")
    assert "0 turns (0 %)" in line
    assert GREEN not in line and _in("yellow", "0 turns (0 %)") in line
    continuations = _line(_summary(failed=3, sent=2, not_recovered=3), "Continuations:")
    assert GREEN not in continuations  # 0 % success of 2 sent


def test_nothing_failed_nothing_is_painted() -> None:
    summary = _summary()
    for label in ("Failed:", "Recovered:", "Gave up:", "Not recovered:", "Continuations:"):
        line = _line(summary, label)
        assert GREEN not in line and RED not in line and YELLOW not in line, line


def test_failures_are_red_only_when_there_are_some() -> None:
    some = _summary(failed=2, not_recovered=1, recovered=1)
    assert _in("red", "2 steps") in _line(some, "Failed:")
    assert _in("red", "1") in _line(some, "Not recovered:")
    assert _in("green", "1 turn (50 %)") in _line(some, "Recovered:")  # some good is green
    none_lost = _summary(failed=1, recovered=1)
    assert RED not in _line(none_lost, "Not recovered:")


def test_given_up_turns_are_yellow_when_some() -> None:
    assert _in("yellow", "1 turn") in _line(_summary(failed=1, gave_up=1), "Gave up:")
    assert YELLOW not in _line(_summary(failed=1, recovered=1), "Gave up:")
