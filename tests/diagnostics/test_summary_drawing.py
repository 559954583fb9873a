"""The summary's chart and tables, drawn without rich (``summary/drawing.py``), are rich's
characters byte for byte; where the drawing cannot be sure to match, rich draws them."""

from __future__ import annotations

import json
import pickle
import random
import string
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from datetime import date, timedelta

import pytest

from opencode_autoretry.diagnostics.render import Style
from opencode_autoretry.diagnostics.summary import view
from opencode_autoretry.diagnostics.summary.drawing import draw
from opencode_autoretry.diagnostics.summary.tally import (
    FATES,
    LEFT_ALONE,
    DayCount,
    Summary,
    Tally,
)

MODELS = ("fake/fake-model", "anthropic/claude-sonnet-4-5", "openai/gpt-5", "a", "",
          "google/gemini 2.5 pro", "x  y", " lead", "trail ")
KINDS = ("blank", "rate_limit", "server_error", "disconnect", "todo")
#: Not printable ASCII: rich measures, expands or splits these; the drawing leaves them to it.
ODD_NAMES = ("mistral/modèle", "qwen/通义千问", "e\u0301", "a\tb", "two\nlines", "\x1b[31m")


def _count(rng: random.Random) -> int:
    """Mostly the counts of a day or a year; now and then too big for the chart's width."""
    return rng.choices([0, 1, rng.randint(2, 99), rng.randint(100, 99_999),
                        rng.randint(10**5, 10**9), 10 ** rng.randint(9, 14)],
                       weights=[4, 2, 4, 3, 1, 0.3])[0]


def _model(rng: random.Random) -> str:
    kind = rng.choices(["usual", "long", "odd"], weights=[30, 2, 1])[0]
    if kind == "usual":
        return rng.choice(MODELS)
    if kind == "odd":
        return rng.choice(ODD_NAMES)
    # near and beyond the width: a 100-column table leaves 69 for the name (4 columns)
    size = rng.choice([rng.randint(20, 120), 66, 67, 68, 69, 70])
    return "p/" + "".join(rng.choice(string.ascii_lowercase + "-._:") for _ in range(size))


def _days(rng: random.Random) -> tuple[DayCount, ...]:
    count = rng.choice([0, 1, 2, 7, 8, 30, 31, 32, 45, rng.randint(0, 120)])
    start = date(2026, 1, 1) + timedelta(days=rng.randint(0, 400))
    failed = [_count(rng) if rng.random() < 0.1 else rng.randint(0, 50) for _ in range(count)]
    # recovered is at most the day's failed mostly; now and then more (the bar is scaled by
    # the busiest day's failed, so it may be longer than that day's failed bar)
    return tuple(DayCount(start + timedelta(days=n), f, rng.randint(0, f + (n % 3)))
                 for n, f in enumerate(failed))


def _summary(rng: random.Random) -> Summary:
    models = {_model(rng): Tally(_count(rng), _count(rng))
              for _ in range(rng.choice([0, 1, 1, 2, 2, 3, 9]))}
    kinds = {rng.choice([*KINDS, *KINDS, "k" * rng.randint(1, 95)]):
             Tally(_count(rng), _count(rng), _count(rng), _count(rng))
             for _ in range(rng.choice([0, 1, 3, 5]))}
    return Summary(failed_steps=1, failed_turns=1, failed_sessions=1,
                   turns=dict.fromkeys(FATES, 0), left_alone=dict.fromkeys(LEFT_ALONE, 0),
                   loops={}, continuations={}, decisions={}, per_day=_days(rng),
                   by_model=models, by_kind=kinds)


def _width(rng: random.Random, colour: bool) -> int:
    """The plain style's is always PLAIN_WIDTH; a terminal's, anything."""
    if not colour:
        return view.PLAIN_WIDTH
    return rng.choice([80, 100, 120, 132, 200, 60, 40, 1, rng.randint(1, 250)])


def _by_rich(summary: Summary, style: Style, width: int,
             monkeypatch: pytest.MonkeyPatch) -> str:
    with monkeypatch.context() as patch:
        patch.setattr(view, "draw", lambda *_: None)
        return view.render_summary(summary, style, width)


@pytest.mark.parametrize("seed", range(4))
def test_the_drawing_is_riches_output_byte_for_byte(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    drawn: Counter[bool] = Counter()  # by colour
    fell = 0
    # 4 x 30 random summaries, each in both styles: rich's side of the comparison is ~95 % of
    # the time (~25 ms a summary, ~3x that under the suite's coverage), so the count is what
    # the suite can afford; every seed still takes both paths in both styles (below).
    for _ in range(30):
        summary = _summary(rng)
        for colour in (False, True):
            style, width = Style(colour=colour), _width(rng, colour)
            grids = view.summary_grids(summary, style)
            ours = draw(grids, colour, width)
            if ours is None:
                fell += 1
            else:
                drawn[colour] += 1
                assert ours == view.draw_with_rich(grids, style, width), (colour, width)
            rendered = view.render_summary(summary, style, width)
            assert rendered == _by_rich(summary, style, width, monkeypatch), (colour, width)
    # both paths taken, the drawing most of the time, in both styles
    assert drawn[False] > 12 and drawn[True] > 12 and fell > 5


def typical() -> Summary:
    days = tuple(DayCount(date(2026, 11, 1) + timedelta(days=n), n * 3 % 7, n % 3)
                 for n in range(40))
    return Summary(
        failed_steps=15, failed_turns=14, failed_sessions=6, turns=dict.fromkeys(FATES, 0),
        left_alone=dict.fromkeys(LEFT_ALONE, 0), loops={}, continuations={}, decisions={},
        per_day=days,
        by_model={"fake/fake-model": Tally(15, 1), "anthropic/claude-sonnet-4": Tally(1234, 0)},
        by_kind={"blank": Tally(2, 1, 1, 3), "rate_limit": Tally(10, 0, 0, 12)},
    )


#: Draws the pickled summary on stdin in both styles, in a fresh interpreter.
PROBE = """
import json, pickle, sys
from opencode_autoretry.diagnostics.render import Style
from opencode_autoretry.diagnostics.summary.view import render_summary
summary = pickle.loads(sys.stdin.buffer.read())
out = [render_summary(summary, Style(colour=c), 100) for c in (False, True)]
print(json.dumps({"out": out, "rich": sorted(m for m in sys.modules if m.split(".")[0] == "rich")}))
"""


def test_a_typical_summary_is_drawn_without_importing_rich() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], input=pickle.dumps(typical()),
                          capture_output=True, timeout=60, check=True)
    found = json.loads(done.stdout)
    plain, colour = found["out"]
    assert "| anthropic/claude-sonnet-4 |   1234 |         0 |   0 % |" in plain
    assert "  anthropic/claude-sonnet-4     1234           0     0 %" in colour
    assert "\x1b[31m" + "█" * 30 + "\x1b[0m" in colour
    assert found["rich"] == []


FALLBACK = Summary(
    failed_steps=1, failed_turns=1, failed_sessions=1, turns=dict.fromkeys(FATES, 0),
    left_alone=dict.fromkeys(LEFT_ALONE, 0), loops={}, continuations={}, decisions={},
    per_day=(DayCount(date(2026, 11, 30), 3, 1),),
    by_model={"mistral/modèle-日本": Tally(3, 1), "p/" + "x" * 90: Tally(2, 0)}, by_kind={},
)
#: What rich drew before ``drawing`` existed: a wide character, a name cut with an ellipsis.
FALLBACK_PLAIN = """\
Per day: failed steps (#) and recovered (+)
Mon 2026-11-30  3  ##############################  1  ++++++++++
+---------------------------------------------------------------------+--------+-----------+-------+
| provider/model                                                      | failed | recovered | share |
+---------------------------------------------------------------------+--------+-----------+-------+
| mistral/modèle-日本                                                 |      3 |         1 |  33 % |
| p/xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx… |      2 |         0 |   0 % |
+---------------------------------------------------------------------+--------+-----------+-------+"""
#: ... and in 60 colour columns, where the chart's day wrapped onto a line of its own.
FALLBACK_COLOUR = (
    "Mon         3  \x1b[31m" + "█" * 30 + "\x1b[0m  1  \x1b[32m" + "█" * 10 + "\x1b[0m\n"
    "2026-11-30\n\n"
    " \x1b[1m \x1b[0m\x1b[1mprovider/model             \x1b[0m\x1b[1m \x1b[0m"
    " \x1b[1m \x1b[0m\x1b[1mfailed\x1b[0m\x1b[1m \x1b[0m"
    " \x1b[1m \x1b[0m\x1b[1mrecovered\x1b[0m\x1b[1m \x1b[0m"
    " \x1b[1m \x1b[0m\x1b[1mshare\x1b[0m\x1b[1m \x1b[0m\n"
    " " + "─" * 58 + "\n"
    "  mistral/modèle-日本                3           1    33 %\n"
    "  p/xxxxxxxxxxxxxxxxxxxxxxxx…        2           0     0 %\n"
)


@pytest.mark.parametrize(("size", "drawn"), [(67, True), (68, False)])
def test_a_table_as_wide_as_the_width_is_drawn_one_wider_is_left_to_rich(
    size: int, drawn: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 100-column table (a 67-character name) is rich's natural layout; at 101 rich cuts
    the name."""
    summary = replace(typical(), by_model={"p/" + "x" * (size - 2): Tally(3, 1)})
    grids = view.summary_grids(summary, Style())
    ours = draw(grids, False, view.PLAIN_WIDTH)
    assert (ours is not None) is drawn
    if ours is not None:
        assert max(map(len, ours.splitlines())) == view.PLAIN_WIDTH
        assert ours == view.draw_with_rich(grids, Style(), view.PLAIN_WIDTH)
    rendered = view.render_summary(summary, Style())
    assert rendered == _by_rich(summary, Style(), view.PLAIN_WIDTH, monkeypatch)
    assert ("x" * (size - 2) in rendered) is drawn and ("…" in rendered) is not drawn


def test_what_the_drawing_cannot_be_sure_of_rich_draws_as_before() -> None:
    for colour, width in ((False, view.PLAIN_WIDTH), (True, 60)):
        assert draw(view.summary_grids(FALLBACK, Style(colour=colour)), colour, width) is None
    plain = view.render_summary(FALLBACK, Style())
    assert plain.endswith("\n" + FALLBACK_PLAIN)
    colour = view.render_summary(FALLBACK, Style(colour=True), 60)
    assert colour.endswith("(█ green)\n" + FALLBACK_COLOUR)
