"""StreamGuard over fixture texts (W12 must trigger, W13 must not), W5, and the trim helper."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from opencode_autoretry.repetition.guard import (
    TRIM_NOTICE,
    Detection,
    StreamGuard,
    trim_repeated_tail,
)

FIXTURES = Path(__file__).parent / "fixtures" / "repetition"


def deltas_of(path: Path) -> list[str]:
    """A .jsonl fixture holds OpenCode ``message.part.delta`` events; a .txt fixture is cut
    into 32-64 char deltas with a seed taken from its name (deterministic)."""
    if path.suffix == ".jsonl":
        events = [json.loads(line) for line in path.read_text("utf-8").splitlines() if line]
        return [e["properties"]["delta"] for e in events if e["type"] == "message.part.delta"]
    text = path.read_text("utf-8")
    rng = random.Random(path.name)
    out, i = [], 0
    while i < len(text):
        size = rng.randint(32, 64)
        out.append(text[i : i + size])
        i += size
    return out


def guard_run(deltas: list[str], guard: StreamGuard | None = None) -> Detection | None:
    guard = guard or StreamGuard()
    for delta in deltas:
        found = guard.feed(delta)
        if found:
            return found
    return guard.finish()


def fixture_names(kind: str) -> list[str]:
    return sorted(p.name for p in (FIXTURES / kind).iterdir())


@pytest.mark.parametrize("name", fixture_names("trigger"))
def test_w12_fixtures_trigger(name: str) -> None:
    path = FIXTURES / "trigger" / name
    found = guard_run(deltas_of(path))
    assert found is not None, f"{name}: loop missed"
    text = "".join(deltas_of(path))
    assert found.excerpt and found.excerpt in text


@pytest.mark.parametrize("name", fixture_names("clean"))
def test_w13_fixtures_do_not_trigger(name: str) -> None:
    found = guard_run(deltas_of(FIXTURES / "clean" / name))
    assert found is None, f"{name}: false positive {found}"


@pytest.mark.parametrize(
    ("case", "text", "hit"),
    [
        ("W5 one dominating unigram", "reboot " * 250 + "handling", True),
        ("W5 a dominating bigram", "apply patch apply patch " * 120 + "then verify.", True),
        (
            "W5 varied prose",
            " ".join(
                [
                    "We refactored the store module and added a test for the fallback path.",
                    "The middleware now returns a typed error instead of swallowing failures.",
                    "After the change the whole suite passed on the first run which felt great.",
                    "We also updated the migration script and the seed data for staging.",
                    "The release notes mention the new retry semantics and cache reuse.",
                ]
            )
            * 2,
            False,
        ),
    ],
)
def test_w5_low_diversity(case: str, text: str, hit: bool) -> None:
    chunks = [text[i : i + 48] for i in range(0, len(text), 48)]
    assert (guard_run(chunks) is not None) is hit, case


def test_token_block_catches_what_exact_periods_miss() -> None:
    variants = ("Let me CHECK the file.  ", "let me check the  FILE. ", "LET ME check THE file. ")
    rng = random.Random(3)
    text = "".join(rng.choice(variants) for _ in range(30))  # no exact period
    found = guard_run([text[i : i + 40] for i in range(0, len(text), 40)])
    assert found is not None and found.detector == "token_block"


def test_guard_returns_the_first_detection_once_and_resets() -> None:
    guard = StreamGuard()
    assert guard_run(["again "] * 60, guard) is not None
    assert guard.feed("again " * 50) is None
    assert guard.finish() is None
    guard.reset()
    assert guard.detection is None
    assert guard_run(["A calm sentence about nothing in particular. "], guard) is None


def test_channels_are_independent() -> None:
    text, reasoning = StreamGuard(), StreamGuard()
    hits = [reasoning.feed("让我再想一想。" * 4) for _ in range(10)]
    assert any(hits)
    assert text.feed("Here is the answer.") is None


DET = Detection("tail_period", 4, 30, 10, 120, "the ")


@pytest.mark.parametrize(
    ("text", "where", "keep", "expected"),
    [
        ("Answer is the the the the ", DET, True, f"Answer is the {TRIM_NOTICE}"),
        ("Answer is the the the the ", DET, False, f"Answer is {TRIM_NOTICE}"),
        ("Answer is the the the the ", 10, True, f"Answer is {TRIM_NOTICE}"),
        ("Answer is", 10, True, "Answer is"),  # the loop is not in this text
        ("loop loop loop", 0, True, TRIM_NOTICE),
        (
            "Answer:the the the ",
            Detection("tail_period", 4, 3, 7, 12, "the "),
            False,
            f"Answer: {TRIM_NOTICE}",
        ),
    ],
)
def test_trim_repeated_tail(text: str, where: Detection | int, keep: bool, expected: str) -> None:
    assert trim_repeated_tail(text, where, keep_one_period=keep) == expected


def test_trim_round_trip_on_a_detected_loop() -> None:
    intro = "I looked at the failing test and the fix is simple. "
    text = intro + "Running the tests again now. " * 40
    found = guard_run([text[i : i + 50] for i in range(0, len(text), 50)])
    assert found is not None
    trimmed = trim_repeated_tail(text, found)
    assert trimmed.startswith(intro)
    assert trimmed.endswith(TRIM_NOTICE)
    # The loop may be reported up to a period early (". " before it matches the block's
    # end), so the kept copy can be a rotation: one copy of the words survives either way.
    assert trimmed.count("Running the tests again now") == 1
