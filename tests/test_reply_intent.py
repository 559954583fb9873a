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
