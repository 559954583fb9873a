"""Token-block detector: MiMo's n-gram cases (N1-N9) and the CJK behaviour of the current
monitor (block >= 4 tokens, >= 3 distinct, x20, last 500 tokens, tables exempt)."""

from __future__ import annotations

import pytest

from opencode_autoretry.repetition.tokens import (
    TokenBlockDetector,
    TokenBlockLimits,
    is_separator_row,
    is_table_heavy,
    tokenize,
)

#: MiMo's older monitor settings (block >= 6, x3), used by its older cases N2, N3, N6, N8, N9.
LEGACY = TokenBlockLimits(min_block=6, copies=3, check_every=1)
CELL = "Current after integration verdict needs review"
TABLE = "\n".join(
    [
        "| Technology | Current | After Integration | Verdict |",
        "| --- | --- | --- | --- |",
        f"| Search | {CELL} | Uses indexed retrieval | Stable |",
        f"| Storage | {CELL} | Uses durable cache | Stable |",
        f"| Billing | {CELL} | Uses invoice sync | Stable |",
    ]
)
CHECK_ZH = "我再检查一下这个文件。"
FAILURE = "the same failure keeps happening again now "


def run(text: str, limits: TokenBlockLimits | None = None, chunk: int = 48):
    detector = TokenBlockDetector(limits)
    for i in range(0, len(text), chunk):
        found = detector.feed(text[i : i + chunk])
        if found:
            return found
    return detector.check(final=True)


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("  Hello   WORLD  ", ["hello", "world"]),  # N1
        ("我们再试一次。", ["我", "们", "再", "试", "一", "次", "。"]),
        ("Run 测试 now", ["run", "测", "试", "now"]),
        ("tab\tand\nnewline\u3000wide", ["tab", "and", "newline", "wide"]),
    ],
)
def test_tokenize(text: str, tokens: list[str]) -> None:
    assert tokenize(text) == tokens


@pytest.mark.parametrize(
    ("case", "text", "limits", "hit"),
    [
        ("N2 6-token block x3", "one two three four five six " * 3, LEGACY, True),
        ("N2 6-token block x2", "one two three four five six " * 2, LEGACY, False),
        (
            "N3 20-token block x3",
            " ".join(f"t{i}" for i in range(20))
            + " "
            + (" ".join(f"t{i}" for i in range(20)) + " ") * 2,
            TokenBlockLimits(min_block=4, copies=3, check_every=1),
            True,
        ),
        (
            "N3 20-token block x2",
            (" ".join(f"t{i}" for i in range(20)) + " ") * 2,
            TokenBlockLimits(min_block=4, copies=3, check_every=1),
            False,
        ),
        ("N4 table with repeated cells", TABLE, LEGACY, False),
        (
            "N4 long table, default limits",
            TABLE + "\n" + "\n".join(TABLE.split("\n")[2:]) * 8,
            None,
            False,
        ),
        ("N5 one token x60", "again " * 60, None, False),
        ("N5 pipe-dash alternation", "| --- " * 100, None, False),
        (
            "N6 long sentence x3",
            "This is a rather long sentence that the model keeps on saying. " * 3,
            LEGACY,
            True,
        ),
        (
            "N7 varied sentences",
            "I am the wind. I am the flower. I am the river. I am the stone. "
            "I am the cloud. I am the tree.",
            LEGACY,
            False,
        ),
        ("N9 pipe-bounded prose x3", f"|x| {FAILURE}" * 3, LEGACY, True),
        (
            "N9 pipe rows without separator",
            "\n".join([f"| Not a table | {FAILURE}|"] * 3),
            LEGACY,
            True,
        ),
        ("N9 repeated prose after a table", f"{TABLE}\n{FAILURE * 3}", LEGACY, True),
        (
            "N9 list with repeated phrases",
            "\n".join(
                f"  - {t}: current after integration verdict needs review"
                for t in ("Search", "Storage", "Billing")
            ),
            LEGACY,
            False,
        ),
        ("CJK phrase x24", "继续执行任务" * 24, None, True),
        ("CJK 11-token sentence x20", CHECK_ZH * 20, None, True),
        ("CJK 11-token sentence x19 then other", CHECK_ZH * 19 + "好的，换个方法。", None, False),
        ("one CJK char x200", "哈" * 200, None, False),
        (
            "block of 30 tokens x20 does not fit 500 tokens",
            (" ".join(f"w{i}" for i in range(30)) + " ") * 20,
            None,
            False,
        ),
        (
            "case and whitespace drift",
            "".join(("Let me CHECK the file.  ", "let me check the  FILE. ") * 12),
            None,
            True,
        ),
    ],
)
def test_acceptance_cases(case: str, text: str, limits: TokenBlockLimits | None, hit: bool) -> None:
    assert (run(text, limits) is not None) is hit, case


def test_n8_incremental_appends_and_reset() -> None:
    detector = TokenBlockDetector(LEGACY)
    chunk = "one two three four five six "
    assert detector.feed(chunk) is None
    assert detector.feed(chunk) is None
    assert detector.feed(chunk) is not None
    detector.reset()
    assert detector.feed(chunk) is None


def test_token_split_across_deltas_is_one_token() -> None:
    text = "alpha beta gamma delta " * 25
    one_char = run(text, chunk=1)
    whole = run(text, chunk=len(text))
    assert one_char is not None and whole is not None
    assert one_char.period == whole.period == 4


def test_detection_fields_point_at_the_first_copy() -> None:
    intro = "Some honest work first, then: "
    block = "I will check the config again. "
    found = run(intro + block * 30)
    assert found is not None
    assert found.detector == "token_block"
    assert found.period == 6
    assert found.loop_start == len(intro)
    assert found.excerpt == block
    assert found.repeats >= 20


def test_interning_stays_bounded() -> None:
    detector = TokenBlockDetector()
    for i in range(0, 20000, 50):
        detector.feed(" ".join(f"tok{j}" for j in range(i, i + 50)) + " ")
    assert len(detector._intern) <= 8 * detector.limits.window_tokens + 1
    assert len(detector._codes) <= 2 * detector.limits.window_tokens


@pytest.mark.parametrize(
    ("line", "separator"),
    [
        ("| --- | --- |", True),
        ("|:---:|---|", True),
        ("--- | ---", True),
        ("---", False),  # a thematic break, not a table
        ("| a | b |", False),
    ],
)
def test_separator_row(line: str, separator: bool) -> None:
    assert is_separator_row(line) is separator


@pytest.mark.parametrize(
    ("region", "context", "heavy"),
    [
        (TABLE, TABLE, True),
        ("| a | b |\n| a | b |", "| a | b |", False),  # pipe rows but no separator anywhere
        (FAILURE * 5, TABLE, False),
        ("", TABLE, False),
    ],
)
def test_table_heavy(region: str, context: str, heavy: bool) -> None:
    assert is_table_heavy(region, context) is heavy
