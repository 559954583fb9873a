"""Cross-step loops: MiMo text-loop / loop-streak (S1-S7), repeated tool calls, Gemini's tool
cycles (G4), the watchdog's tool-loop fixture (W12)."""

from __future__ import annotations

import pytest

from opencode_autoretry.repetition.steps import (
    CrossStepDetector,
    StepSummary,
    canonical_json,
    normalise,
    streak_key,
    text_key,
)

READ = ("read", '{"filePath":"src/app.ts"}')
GREP = ("grep", '{"pattern":"TODO"}')
BASH = ("bash", '{"command":"git status --porcelain"}')


def step(text: str = "", reasoning: str = "", *tools: tuple[str, str]) -> StepSummary:
    return StepSummary(text=text, reasoning=reasoning, tools=tuple(tools))


def feed(steps: list[StepSummary]):
    detector = CrossStepDetector()
    return [detector.observe(s) for s in steps]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"b": 1, "a": [2, {"d": 3, "c": 4}]}, '{"a":[2,{"c":4,"d":3}],"b":1}'),
        ('{"b": 1, "a": 2}', '{"a":2,"b":1}'),  # already-serialised input is re-canonicalised
        ("not json", "not json"),
        ({"path": "文件.ts"}, '{"path":"文件.ts"}'),
        (None, "null"),
    ],
)
def test_canonical_json(value: object, expected: str) -> None:
    assert canonical_json(value) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("  Let me   CHECK\nthe file ", "check the file"),
        ("I'll run the tests", "run the tests"),
        ("Let's see", "see"),
        ("letter to me", "letter to me"),
    ],
)
def test_normalise(text: str, expected: str) -> None:
    assert normalise(text) == expected


def test_s1_no_reasoning_no_tool_is_an_empty_key() -> None:
    assert streak_key(step("just narration")) == ""
    assert feed([step("")] * 5) == [None] * 5


def test_s2_same_thinking_with_drifting_tools_and_narration_is_one_key() -> None:
    a = step("Checking app.ts", "I need to look at app.ts again.", READ)
    drifted = ("read", '{"filePath":"x"}')
    b = step("Looking at the file", "I  need to look at APP.ts again.", drifted)
    assert streak_key(a) == streak_key(b)
    assert streak_key(a).startswith("reason:")


def test_s3_different_thinking_gives_different_keys() -> None:
    assert streak_key(step("", "plan A")) != streak_key(step("", "plan B"))


def test_s4_tool_key_ignores_input_key_order() -> None:
    one = StepSummary.build(tools=[("edit", {"path": "a.ts", "old": "x", "new": "y"})])
    two = StepSummary.build(tools=[("edit", {"new": "y", "path": "a.ts", "old": "x"})])
    assert streak_key(one) == streak_key(two) == "tool:" + one.tool_signature


def test_s5_reasoning_fragments_are_joined_before_hashing() -> None:
    joined = StepSummary.build(reasonings=["first thought", "second thought"])
    single = StepSummary(reasoning="first thought second thought")
    assert streak_key(joined) == streak_key(single)


def test_s6_tool_only_loop_keys_on_the_exact_signature() -> None:
    assert streak_key(step("", "", BASH)) == "tool:bash:" + BASH[1]
    assert streak_key(step("", "", BASH)) != streak_key(step("", "", GREP))


@pytest.mark.parametrize(
    ("case", "steps"),
    [
        ("S7 below the trigger", [step("", "same thought", READ)] * 2),
        ("S7 differing tails", [step("", "same thought", READ)] * 2 + [step("", "new idea", GREP)]),
        ("S7 empty keys", [step("ok")] + [step()] * 4),
        (
            "tools broken by a tool-less step",
            [step("", "", BASH)] * 2 + [step()] + [step("", "", BASH)],
        ),
        ("different narration each step", [step(f"Trying approach {i}.") for i in range(5)]),
    ],
)
def test_no_loop(case: str, steps: list[StepSummary]) -> None:
    assert feed(steps)[-1] is None, case


@pytest.mark.parametrize(
    ("case", "steps", "detector", "streak"),
    [
        ("same text 3 steps", [step("Let me check the build.")] * 3, "text_loop", 3),
        (
            "same text despite case and opener",
            [
                step("Let me check the build."),
                step("let me CHECK the build."),
                step("Check  the build."),
            ],
            "text_loop",
            3,
        ),
        (
            "same text, tool-only steps between",
            [
                step("Retrying now."),
                step("", "", GREP),
                step("Retrying now."),
                step("", "", READ),
                step("Retrying now."),
            ],
            "text_loop",
            3,
        ),
        (
            "same reasoning, drifting tools",
            [
                step("", "Look at app.ts once more.", ("read", f'{{"offset":{i}}}'))
                for i in range(3)
            ],
            "reasoning_loop",
            3,
        ),
        ("same call 3 steps", [step("", "", BASH)] * 3, "tool_repeat", 3),
        ("same call 4 steps", [step("", "", BASH)] * 4, "tool_repeat", 4),
        ("G4 cycle of 2 x5", [step("", "", t) for t in (READ, GREP) * 5], "tool_cycle", 4),
        ("G4 cycle of 3 x5", [step("", "", t) for t in (READ, GREP, BASH) * 5], "tool_cycle", 4),
        (
            "G4 cycle of 5 x5",
            [step("", "", ("t", f'{{"n":{i % 5}}}')) for i in range(25)],
            "tool_cycle",
            4,
        ),
    ],
)
def test_loop(case: str, steps: list[StepSummary], detector: str, streak: int) -> None:
    found = feed(steps)[-1]
    assert found is not None, case
    assert (found.detector, found.streak) == (detector, streak), case


def test_g4_varying_alternation_is_no_loop() -> None:
    steps = [step("", "", ("read", f'{{"filePath":"f{i}.ts"}}'), GREP) for i in range(12)]
    assert all(found is None for found in feed(steps))


def test_w12_tool_loop_fixture_four_identical_git_status_calls() -> None:
    results = feed([step("Checking the deployed version.", "", BASH)] + [step("", "", BASH)] * 3)
    assert results[:2] == [None, None]
    assert results[2] is not None and results[2].detector == "tool_repeat"


def test_keeps_reporting_while_the_loop_goes_on_and_reset_clears() -> None:
    detector = CrossStepDetector()
    looping = step("", "", BASH)
    found = [detector.observe(looping) for _ in range(5)]
    assert [f is not None for f in found] == [False, False, True, True, True]
    detector.reset()
    assert detector.observe(looping) is None


def test_text_key_includes_the_tool_signature() -> None:
    assert text_key(step("same", "", READ)) != text_key(step("same", "", GREP))
    assert text_key(step("   ")) == ""
