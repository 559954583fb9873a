"""Tail-period detector: MiMo's loop-detector cases (L1-L14), the watchdog's short-pattern and
duplicate-sentence cases (W1-W4, W6), Gemini's content cases (G5, G6)."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from opencode_autoretry.repetition.period import (
    Detection,
    FenceTracker,
    PeriodThresholds,
    TailPeriodDetector,
    _Scan,
    has_period,
    periodic_run,
    required_repeats,
)

SENTENCE = "We should explore the project directory and verify all generated codes. "
PARAGRAPH = (
    "Hello world! This is a test of the loop detector. It should not trigger for normal "
    "English sentences, even if there are some repeated words like test or loop or detector. "
)
JACK = "All work and no play makes Jack a dull boy. "
CODE_LINE = "console.log('attempting the operation once more now')\n"


def run(text: str, chunk: int = 64, detector: TailPeriodDetector | None = None):
    detector = detector or TailPeriodDetector()
    for i in range(0, len(text), chunk):
        found = detector.feed(text[i : i + chunk])
        if found:
            return found
    return detector.check()


def prose(words: int) -> str:
    return "".join(f"word{i:x} " for i in range(words))


@pytest.mark.parametrize(
    ("case", "text", "chunk", "period"),
    [
        ("L1 paragraph x3", PARAGRAPH * 3, 64, None),
        ("L2 sentence x6", SENTENCE * 6, 64, None),
        ("L2 sentence x12", SENTENCE * 12, 64, len(SENTENCE)),
        ("L3 sentence x5 + other", SENTENCE * 5 + "Now let us move on to something new.", 64, None),
        ("L4 jack x40 in 7-char chunks", JACK * 40, 7, len(JACK)),
        ("L5 dashes x280", "-" * 280, 64, None),
        ("L5 dashes x300", "-" * 300, 64, 1),
        ("L6 again x60", "again " * 60, 64, 6),
        ("L7 unicode sentence x100", "我们再试一次。" * 100, 64, 7),
        ("L8 data inside a json fence", "```json\n" + "  0,\n" * 100, 64, None),
        ("L8 same data outside a fence", "  0,\n" * 100, 64, 5),
        ("L9 long code line x30 in a fence", "```ts\n" + CODE_LINE * 30, 64, len(CODE_LINE)),
        (
            "L10 closed fence restores thresholds",
            "```json\n[1, 2]\n```\nDone. " + "  0,\n" * 100,
            64,
            5,
        ),
        (
            "L14 loop after 5000 words",
            prose(5000) + "I will try the same approach once more. " * 20,
            64,
            40,
        ),
        ("W1 递归 x30", "递归" * 30, 64, 2),
        ("W2 递归 x20", "递归" * 20, 64, 2),
        ("W2 递归 x19", "递归" * 19, 64, None),
        ("W3 dots x25", "." * 25, 64, 1),
        ("W3 dots x11", "." * 11, 64, None),
        (
            "W4 ordinary prose",
            "Let me inspect the store controller and the auth middleware "
            "before deciding on a fix path.",
            64,
            None,
        ),
        ("W6 duplicate sentence x6", "We fixed the parser and re-ran the suite. " * 6, 64, 42),
        ("W6 duplicate sentence x5", "We fixed the parser and re-ran the suite. " * 5, 64, None),
    ],
)
def test_acceptance_cases(case: str, text: str, chunk: int, period: int | None) -> None:
    found = run(text, chunk)
    if period is None:
        assert found is None, f"{case}: unexpected {found}"
    else:
        assert found is not None, f"{case}: loop missed"
        assert found.period == period, case


def test_l11_fence_marker_split_across_chunks() -> None:
    detector = TailPeriodDetector()
    detector.feed("`")
    detector.feed("``json\n")
    assert run("  0,\n" * 100, detector=detector) is None
    assert detector.in_fence


def test_l12_reset_clears_state() -> None:
    detector = TailPeriodDetector()
    assert run(SENTENCE * 7, detector=detector) is None
    detector.reset()
    assert detector.fed == 0
    assert run(SENTENCE * 7, detector=detector) is None


def test_l13_empty_delta_is_no_loop() -> None:
    assert TailPeriodDetector().feed("") is None


def test_detection_reports_where_the_loop_starts() -> None:
    intro = "Here is the summary of the change and what I verified. "
    text = intro + "the " * 100
    found = run(text)
    assert found is not None
    assert found.loop_start == len(intro) - 1  # the space before the first "the" belongs
    assert text[found.loop_start : found.loop_start + found.period] == found.excerpt
    assert found.loop_start + found.tail_length <= len(text)
    assert found.repeats == found.tail_length // found.period


def test_fires_once_until_reset() -> None:
    detector = TailPeriodDetector()
    assert run("again " * 60, detector=detector) is not None
    assert detector.feed("again " * 40) is None
    assert detector.check() is None


def test_window_bounds_memory() -> None:
    detector = TailPeriodDetector()
    run(prose(20000), detector=detector)
    assert len(detector._window) <= detector.limits.window


@pytest.mark.parametrize(
    ("block", "in_fence", "expected"),
    [
        ("-", False, 300),  # structural: MiMo's table
        ("  0,\n", False, 40),
        ("[0, 0, 0, 0, 0, 0, 0, 0],\n", False, 16),
        (".", False, 20),  # word-like short pattern: the watchdog's 20
        ("递归", False, 20),
        ("loop ", False, 20),
        ("We fixed the parser and re-ran the suite. ", False, 6),
        (SENTENCE, False, 8),
        ("x" * 300, False, 5),
        ("  0,\n", True, None),  # p < 30 never counts inside a fence
        (CODE_LINE, True, 24),
        ("y" * 400, True, 10),  # 24 copies would not fit the 4000-char window
    ],
)
def test_required_repeats(block: str, in_fence: bool, expected: int | None) -> None:
    limits = PeriodThresholds()
    assert required_repeats(len(block), block, in_fence, limits) == expected


@pytest.mark.parametrize("period", [1, 2, 7, 30, 166, 199, 200, 500, 800])
def test_every_threshold_is_reachable_inside_the_window(period: int) -> None:
    limits = PeriodThresholds()
    for block in ("a" * period, "-" * period):
        for in_fence in (False, True):
            repeats = required_repeats(period, block, in_fence, limits)
            assert repeats is None or repeats * period <= limits.window


@pytest.mark.parametrize(
    ("chunks", "markers"),
    [
        (["```py\nx\n```"], 2),
        (["`", "``py\n"], 1),
        (["``", "`", "\n```"], 2),
        (["````md\n"], 1),
        (["`code` and ``x``"], 0),
    ],
)
def test_fence_tracker(chunks: list[str], markers: int) -> None:
    tracker = FenceTracker()
    for chunk in chunks:
        tracker.feed(chunk)
    assert tracker.markers == markers


@pytest.mark.parametrize(
    ("text", "period", "expected"),
    [
        ("xyzabcabcabc", 3, 9),  # z != c, so the run stops at the first "a"
        ("abcabcabc", 3, 9),
        ("abcd", 3, 3),
        ("aaaa", 1, 4),
    ],
)
def test_periodic_run(text: str, period: int, expected: int) -> None:
    assert periodic_run(text, period) == expected
    assert has_period(text, period, expected)


def test_periodic_run_counts_a_partial_copy() -> None:
    assert periodic_run("qabcabcab", 3) == 8
    assert not has_period("qabcabcab", 3, 9)


@pytest.mark.parametrize(
    ("case", "text", "loops"),
    [
        ("G5 random content", prose(800), False),
        (
            "G5 repeated 50-char chunk x10",
            ("This chunk keeps coming back, over and over! " + "abcd") * 10,
            True,
        ),
        (
            "G5 list with a long shared prefix",
            "".join(
                f"- The configuration option number {i} controls item {i * 7}\n" for i in range(40)
            ),
            False,
        ),
        (
            "G5 repetitions far apart",
            "".join(
                f"The same remark again. Then fact {i} about part {i * 13}, noted in "
                f"detail for the record.\n"
                for i in range(20)
            ),
            False,
        ),
        (
            "G5 ~150-char pattern x10",
            (
                "I have examined the configuration and the logs, and I "
                "believe the fix is to restart the service once more and check again later. " * 2
            )[:150]
            * 10,
            True,
        ),
        ("G5 alternating short phrases", "Thinking...\nProcessing...\n" * 30, True),
        ("G6 code block", "```js\n" + "const value = compute();\n" * 50 + "```\n", False),
        ("G6 table rows", "| a | b |\n|---|---|\n" + "| x | y |\n" * 10, False),
        ("G6 list items", "- item\n" * 10, False),
        (
            "G6 list with shared structure",
            "".join(f"- [ ] step {i}: check the {['lexer', 'parser'][i % 2]}\n" for i in range(30)),
            False,
        ),
        ("G6 headings", "## Heading\n" * 10, False),
        ("G6 blockquotes", "".join(f"> Note {i}: keep the default.\n" for i in range(20)), False),
        ("deviation: one quoted sentence x10 is a loop", "> The same quoted line.\n" * 10, True),
        ("G6 dividers", "---\n" * 10, False),
        ("G6 box drawing", "─" * 250 + "\n" + "═" * 250, False),
    ],
)
def test_gemini_content_cases(case: str, text: str, loops: bool) -> None:
    assert (run(text) is not None) is loops, case


def test_detected_within_one_kilobyte_once_reachable() -> None:
    intro = prose(400)
    block = "I will run the failing test again to see what happens. "
    found = run(intro + block * 40)
    assert isinstance(found, Detection)
    needed = required_repeats(len(block), block, False, PeriodThresholds()) * len(block)
    detected_at = found.loop_start + found.tail_length
    assert detected_at - len(intro) <= max(needed, 1024) + 128 + 64


def reference_loop(s: str, limits: PeriodThresholds, in_fence: bool = False) -> int | None:
    """MiMo's semantics, brute force: the smallest period of every suffix from a KMP prefix
    function over the reversed string; the first suffix that repeats enough wins."""
    r = s[::-1]
    pi = [0] * len(r)
    for i in range(1, len(r)):
        j = pi[i - 1]
        while j and r[i] != r[j]:
            j = pi[j - 1]
        pi[i] = j + (r[i] == r[j])
    for i in range(len(r)):
        length = i + 1
        period = length - pi[i]
        if period > min(limits.max_period, len(s) // 2):
            continue
        need = required_repeats(period, s[len(s) - period :], in_fence, limits)
        if need is not None and length // period >= need:
            return period
    return None


SMALL = PeriodThresholds(window=400, max_period=60, check_every=1)


@settings(max_examples=300, deadline=None)
@given(
    prefix=st.text(alphabet="ab -", max_size=120),
    block=st.text(alphabet="ab -", min_size=1, max_size=30),
    copies=st.integers(min_value=0, max_value=30),
    suffix=st.text(alphabet="ab -", max_size=6),
)
def test_scan_agrees_with_brute_force(prefix: str, block: str, copies: int, suffix: str) -> None:
    s = (prefix + block * copies + suffix)[-SMALL.window :]
    found = _Scan(s, False, SMALL).find()
    expected = reference_loop(s, SMALL)
    assert (found[0] if found else None) == expected


def _fence_markers(text: str) -> int:
    """Reference: runs of three or more backticks in the whole text."""
    return sum(1 for match in re.finditer(r"`+", text) if len(match.group()) >= 3)


@pytest.mark.parametrize("seed", range(20))
def test_fence_markers_do_not_depend_on_how_the_text_is_cut(seed: int) -> None:
    # Chunks without a backtick take a shortcut (issue 21); a run of backticks cut by one
    # must still end there, and one split over several chunks still count once.
    rng = random.Random(seed)
    text = "".join(rng.choice(["`", "``", "```", "a", " ", "\n", "code"]) for _ in range(300))
    tracker, at = FenceTracker(), 0
    while at < len(text):
        size = rng.randint(1, 6)
        tracker.feed(text[at : at + size])
        at += size
    assert tracker.markers == _fence_markers(text)
    assert tracker.markers > 0


def test_a_chunk_without_backticks_ends_a_run() -> None:
    tracker = FenceTracker()
    for chunk in ("``", "x", "`"):
        tracker.feed(chunk)
    assert tracker.markers == 0
    for chunk in ("``", "`"):
        tracker.feed(chunk)
    assert tracker.markers == 1
