"""The pure todo verdict, the stagnation count and the [todos] config."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from opencode_autoretry.config.settings import SettingsError
from opencode_autoretry.decisions.budget import DecisionContext, decide, new_ledger
from opencode_autoretry.decisions.policy import load_policy
from opencode_autoretry.models import (
    Action,
    BudgetGroup,
    ErrorInfo,
    Kind,
    Message,
    Part,
    PartType,
    Role,
    Turn,
)
from opencode_autoretry.todos.config import TodoConfig, load_todo_config, with_todo_budget
from opencode_autoretry.todos.continuation import (
    Todo,
    continuation_text,
    countdown_toast,
    signature,
    stagnant_run,
    todo_verdict,
)

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
TWO = [Todo("Write the parser", "in_progress"), Todo("Add the tests", "pending")]


def _part(pid: str, data: dict) -> Part:
    return Part(pid, "msg_2", "ses_1", PartType.parse(data["type"]), NOW, data)


def turn(text: str, *, agent: str = "build", tool_error: str | None = None) -> Turn:
    parts = [_part("prt_1", {"type": "text", "text": text})]
    if tool_error is not None:
        state = {"status": "error", "error": tool_error}
        parts.append(_part("prt_2", {"type": "tool", "tool": "bash", "state": state}))
    user = Message("msg_1", "ses_1", Role.USER, NOW)
    step = Message("msg_2", "ses_1", Role.ASSISTANT, NOW, finish="stop", agent=agent,
                   parts=tuple(parts))
    return Turn("ses_1", user, (step,))


def verdict(text: str = "I'll start with the first one.", history=None, **kw):
    todos = kw.pop("todos", TWO)
    hist = history if history is not None else [signature(todos)]
    return todo_verdict(turn(text, **kw), todos, TodoConfig(), hist, agent=kw.get("agent"))


def test_a_reply_that_carries_on_with_todos_left_is_retryable_and_names_them():
    found = verdict()
    assert found is not None and found.retryable and found.kind is Kind.UNFINISHED_TODOS
    assert found.group is BudgetGroup.TODOS and found.give_up is None
    assert "2 of 2 todos unfinished" in found.reason
    assert "- [in_progress] Write the parser" in found.text
    assert "- [pending] Add the tests" in found.text


def test_all_completed_gives_no_verdict():
    assert verdict(todos=[Todo("a", "completed"), Todo("b", "cancelled")]) is None


@pytest.mark.parametrize(
    "text, why",
    [
        ("Should I use SQLite or Postgres?", "asks"),
        ("请确认是否继续", "asks"),
        ("All todos are done.", "done"),
        ("I'm blocked by the missing token.", "blocked"),
    ],
)
def test_a_reply_that_asks_is_done_or_blocked_is_never_retryable(text, why):
    found = verdict(text)
    assert found is not None and not found.retryable and f"the reply {why}" in found.reason


def test_skip_agents_and_refusals_are_guards():
    plan = todo_verdict(turn("I'll go on.", agent="plan"), TWO, TodoConfig(), [], agent="plan")
    assert plan is not None and not plan.retryable and "skip_agents" in plan.reason
    refused = verdict(tool_error="The user rejected permission to use this specific tool call.")
    assert refused is not None and not refused.retryable and "refused" in refused.reason
    dismissed = todo_verdict(turn("I'll go on."), TWO, TodoConfig(), [], agent="build",
                             refused="a question was dismissed")
    assert dismissed is not None and not dismissed.retryable


def test_stagnation_counts_continuations_that_changed_nothing():
    same, moved = signature(TWO), signature([Todo("Write the parser", "completed"), TWO[1]])
    assert stagnant_run([same]) == 0
    assert stagnant_run([same, same]) == 1
    assert stagnant_run([same, same, same]) == 2
    assert stagnant_run([same, moved, moved]) == 1
    assert verdict(history=[same, same]).give_up is None
    assert "stagnation" in verdict(history=[same, same, same]).give_up
    assert "changed 1 todo" in verdict(history=[same, moved]).reason


def test_through_the_decision_core_countdown_budget_and_stagnation_notice():
    policy = with_todo_budget(load_policy({}), TodoConfig())
    ledger = new_ledger("ses_1", "msg_1")
    context = DecisionContext(session_id="ses_1", is_child=False)
    decision, ledger = decide(ledger, verdict(), context, policy, NOW)
    assert decision.action is Action.INJECT_AT and (decision.due - NOW).total_seconds() == 5
    assert decision.text.startswith("Your todo list still has 2 unfinished")
    # The model defers to the user even when the reply-intent guard missed a question.
    assert "asked the user for a decision, an approval, a file or any other input" in decision.text
    assert "do not act: restate that question in one line and stop" in decision.text
    same = signature(TWO)
    stuck = verdict(history=[same, same, same])
    stuck = type(stuck)(**{**stuck.__dict__, "message_id": "msg_9"})
    decision, ledger = decide(ledger, stuck, context, policy, NOW)
    assert decision.action is Action.NOTIFY and BudgetGroup.TODOS in ledger.exhausted
    again, _ = decide(ledger, stuck, context, policy, NOW)
    assert again.action is Action.SKIP and "exhausted" in again.reason


@pytest.mark.parametrize(
    "context, why",
    [
        (DecisionContext(session_id="ses_1", is_child=True), "child session"),
        (DecisionContext(session_id="ses_1", is_child=False, enabled=False), "autoretry is off"),
        (DecisionContext(session_id="ses_1", is_child=None), "fail-closed"),
    ],
)
def test_the_common_gates_hold(context, why):
    policy = with_todo_budget(load_policy({}), TodoConfig())
    decision, _ = decide(new_ledger("ses_1", "msg_1"), verdict(), context, policy, NOW)
    assert decision.action is Action.SKIP and why in decision.reason


def test_budget_runs_out_after_max_continuations():
    policy = with_todo_budget(load_policy({}), TodoConfig(max_continuations=1, countdown=0))
    ledger = new_ledger("ses_1", "msg_1")
    context = DecisionContext(session_id="ses_1", is_child=False)
    first, ledger = decide(ledger, verdict(), context, policy, NOW)
    assert first.action is Action.INJECT
    v = verdict()
    v = type(v)(**{**v.__dict__, "message_id": "msg_3"})
    second, ledger = decide(ledger, v, context, policy, NOW)
    assert second.action is Action.NOTIFY


def test_texts():
    two = [Todo("Write the parser", "in_progress"), Todo("Add the tests", "pending")]
    assert countdown_toast(TodoConfig(), two) == (
        "autoretry: 2 todos left — continuing in 5 s; write anything to stop. Will send: the "
        "open todos (next: “Write the parser”), asking to go on unless the last reply asked "
        "you something")
    one = [Todo("x" * 100, "pending")]
    assert countdown_toast(TodoConfig(countdown=1.5), one).startswith("autoretry: 1 todo left")
    assert "“" + "x" * 59 + "…”" in countdown_toast(TodoConfig(), one)  # a long todo is cut
    many = [Todo(f"t{i}", "pending") for i in range(12)]
    text = continuation_text(TodoConfig(message="{count}: {todos}"), many)
    assert text.startswith("12: - [pending] t0") and "… and 2 more" in text


def test_config_defaults_and_validation():
    config = load_todo_config({})
    assert config == TodoConfig() and config.skip_agents == ("plan",)
    config = load_todo_config({"enabled": False, "countdown": 1, "skip_agents": ["plan", "x"]})
    assert not config.enabled and config.countdown == 1.0 and config.skip_agents == ("plan", "x")
    for raw, needle in [
        ({"nope": 1}, "todos: unknown key(s) nope"),
        ({"enabled": "yes"}, "todos.enabled"),
        ({"max_continuations": -1}, "todos.max_continuations"),
        ({"stagnation": 0}, "todos.stagnation"),
        ({"countdown": "5"}, "todos.countdown"),
        ({"skip_agents": "plan"}, "todos.skip_agents"),
        ({"message": ""}, "todos.message"),
    ]:
        with pytest.raises(SettingsError, match=needle.replace("(", r"\(").replace(")", r"\)")):
            load_todo_config(raw)


def test_run_refuses_a_bad_todos_table_naming_the_key(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from opencode_autoretry.cli.main import main

    config = tmp_path / "config.toml"
    config.write_text("[todos]\ncountdown = \"soon\"\n")
    env = {"AUTORETRY_CONFIG": str(config), "AUTORETRY_HOME": str(tmp_path / "home"),
           "AUTORETRY_SOCKET": str(tmp_path / "d.sock"), "OPENCODE_DB": str(tmp_path / "x.db")}
    result = CliRunner().invoke(main, ["run"], env=env)
    assert result.exit_code != 0
    assert "todos.countdown must be a number of seconds" in result.output


def test_budgets_todos_is_refused_in_favour_of_the_todos_table():
    from opencode_autoretry.decisions.policy import PolicyError

    with pytest.raises(PolicyError, match=r"budgets.todos: set \[todos\]"):
        with_todo_budget(load_policy({"budgets": {"todos": {"max_retries": 5}}}), TodoConfig())
    with_todo_budget(load_policy({"providers": {"x": {"budgets": {"server": {}}}}}), TodoConfig())


# --- issue 19: the guards other tools have --------------------------------------------------


def _step(mid: str, *, parts=(), error=None, summary=False, mode=None, at=NOW) -> Message:
    return Message(mid, "ses_1", Role.ASSISTANT, at, time_completed=at, finish="stop",
                   agent="build", error=error, summary=summary, mode=mode, parts=tuple(parts))


def _guarded(*steps: Message, now=NOW, **kw):
    user = Message("msg_1", "ses_1", Role.USER, NOW - timedelta(minutes=5))
    text = _part("prt_t", {"type": "text", "text": "I'll start with the first one."})
    last = steps[-1] if steps else _step("msg_9")
    last = Message(**{**last.__dict__, "parts": (text, *last.parts)})
    t = Turn("ses_1", user, (*steps[:-1], last))
    return todo_verdict(t, TWO, TodoConfig(), [signature(TWO)], agent="build", now=now, **kw)


def _question(status: str) -> Part:
    return _part("prt_q", {"type": "tool", "tool": "question", "state": {"status": status}})


@pytest.mark.parametrize("status", ["pending", "running"])
def test_an_unanswered_question_tool_call_blocks_the_continuation(status):
    found = _guarded(_step("msg_9", parts=[_question(status)]))
    assert found is not None and not found.retryable
    assert "question tool call the user has not answered" in found.reason
    answered = _guarded(_step("msg_9", parts=[_question("completed")]))
    assert answered is not None and answered.retryable  # an answered question is no guard


def test_no_continuation_within_60_s_of_a_compaction():
    summary = _step("msg_5", summary=True, mode="compaction", at=NOW - timedelta(seconds=30))
    found = _guarded(summary, _step("msg_9"))
    assert found is not None and not found.retryable and "compacted 30 s ago" in found.reason
    later = _guarded(summary, _step("msg_9"), now=NOW + timedelta(seconds=31))
    assert later is not None and later.retryable
    by_event = _guarded(_step("msg_9"), compacted_at=NOW - timedelta(seconds=59))
    assert by_event is not None and not by_event.retryable and "compacted" in by_event.reason


def test_a_turn_that_overflowed_or_was_aborted_is_never_continued():
    overflow = _step("msg_5", error=ErrorInfo("ContextOverflowError", "prompt is too long"))
    found = _guarded(overflow, _step("msg_9"), now=NOW + timedelta(minutes=5))
    assert found is not None and not found.retryable and "context overflow" in found.reason
    aborted = _step("msg_5", error=ErrorInfo("MessageAbortedError", "aborted"))
    found = _guarded(aborted, _step("msg_9"))
    assert found is not None and not found.retryable and "user aborted" in found.reason
    late = _guarded(_step("msg_9"), aborted="the user aborted this turn")  # seen as an event
    assert late is not None and not late.retryable and "user aborted" in late.reason
    assert _guarded(_step("msg_9")).retryable  # and without any of them it is continued
