"""The reply-intent detector, case by case (the corpus test measures it at scale)."""

from __future__ import annotations

import pytest

from opencode_autoretry.todos.reply_intent import Intent, read_intent


@pytest.mark.parametrize(
    "text, intent",
    [
        ("I'll start with the first one.", Intent.CONTINUES),
        ("接下来处理第二个待办。", Intent.CONTINUES),
        ("Should I go on?", Intent.ASKS),
        ("要继续吗", Intent.ASKS),
        ("", Intent.ASKS),
        ("   \n ", Intent.ASKS),
        ("```\nprint('x')\n```", Intent.ASKS),  # nothing but code: in doubt
        # A neutral report of a step just done, with todos open, is a premature stop.
        ("Wrote the file.", Intent.CONTINUES),
        ("The file is written.", Intent.ASKS),  # no sign it carries on: in doubt
        ("All todos are done.", Intent.DONE),
        ("I'm blocked by the missing token.", Intent.BLOCKED),
        ("I'll fix it next. Which of the two do you want first", Intent.ASKS),
    ],
)
def test_intent(text, intent):
    assert read_intent(text).intent is intent


def test_question_marks_inside_code_and_urls_do_not_count():
    text = (
        "Matched `a?b` and https://x.test/?q=1 in the regex.\n"
        "```\nx = y ? 1 : 2\n```\nNext I'll add the tests."
    )
    found = read_intent(text)
    assert found.may_continue, found.reason


def test_a_question_anywhere_in_the_tail_wins_over_a_next_step():
    found = read_intent("Why did it break? The cache was stale. Next I'll fix the invalidation.")
    assert found.intent is Intent.ASKS and "?" in found.reason


def test_only_the_tail_of_a_long_reply_is_read():
    text = "Is this right? " + "Did the work. " * 200 + "Next I'll run the tests."
    assert read_intent(text).may_continue


# Issue 19: shapes, not phrases. Wording of our own, in the classes that leaked on set A.
@pytest.mark.parametrize(
    "text",
    [
        "Put the token in .env and I'll rerun the sync.",  # an instruction, then "I'll"
        "Seed the database and I'll run the import.",
        "Sign in to the registry in your terminal, and I'll publish straight after.",
        "Once the staging numbers look right, I'll flip the flag to 100%.",  # conditional
        "I'll only be able to finish the import after the quota resets.",
        "The refactor is complete. Keep an eye on the memory graphs this week.",  # done+advice
        "Lacking write access to the bucket, I can't upload the artefacts.",
        "Added the index. Production deploy requires approval from the DBA.",  # someone else
        "Translation files are added; switching the language updates the UI at once.",
        "Let me summarize what changed:",  # a summary ends the work
        "填好 X 之后回我一下，我再跑测试。",
        "评审通过我就合并到 main。",
        "接下来交给测试同学验证。",
        "升级完成。发布前记得改一下生产配置。",
    ],
)
def test_a_reply_that_hands_over_is_never_continued(text):
    found = read_intent(text)
    assert not found.may_continue, found.reason


@pytest.mark.parametrize(
    "text",
    [
        "Extracted the retry logic into retry.py.",  # a neutral progress report
        "Two call sites still use the old API. Updating them:",  # an action line with a colon
        "Now let me update the tests:",
        "Step 2 of 5 is complete; I'll tackle the indexes next.",
        "Running the suite again to check the rename.",
        "已把三套环境配置合并成一个。",
        "先看看连接池的配置：",
        "路由守卫写好了，下一步我来做跳转页。",
    ],
)
def test_a_reply_that_carries_on_by_itself_is_continued(text):
    found = read_intent(text)
    assert found.may_continue, found.reason
