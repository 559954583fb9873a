"""Pure pieces of the daemon, by table: the session view, toasts, continuation target."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from opencode_autoretry.causes import Cause, Facts
from opencode_autoretry.daemon.actions import continuation_target, recovery_toast
from opencode_autoretry.daemon.sessions import (
    Sessions,
    SessionView,
    apply_tool_part,
    event_session_id,
    expire_abort,
    is_stalled,
    note_unknown_step,
    stall_verdict,
)
from opencode_autoretry.models import (
    Action,
    BudgetGroup,
    Decision,
    Kind,
    Message,
    Role,
    Turn,
)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "props, expected",
    [
        ({"sessionID": "ses_a"}, "ses_a"),
        ({"info": {"sessionID": "ses_b"}}, "ses_b"),
        ({"part": {"sessionID": "ses_c"}}, "ses_c"),
        ({"sessionID": "abc"}, None),  # R12: not a session id
        ({}, None),
    ],
)
def test_event_session_id(props, expected):
    assert event_session_id(props) == expected


@pytest.mark.parametrize(
    "states, running",
    [
        (["pending"], {"c1"}),
        (["pending", "running"], {"c1"}),
        (["running", "completed"], set()),
        (["running", "error"], set()),
    ],
)
def test_tool_parts_track_running_calls(states, running):
    view = SessionView("ses_a")
    for state in states:
        apply_tool_part(view, {"type": "tool", "callID": "c1", "state": {"status": state}})
    apply_tool_part(view, {"type": "text", "text": "ignored"})
    assert view.tools_running == running


def step(mid: str, finish: str | None, output: int = 0, error: object = None) -> dict:
    info = {"id": mid, "role": "assistant", "parentID": "msg_u", "finish": finish,
            "tokens": {"output": output}}
    if error:
        info["error"] = error
    return info


@pytest.mark.parametrize(
    "steps, count",
    [
        ([step("m1", "unknown"), step("m2", "unknown")], 2),
        ([step("m1", "unknown"), step("m1", "unknown")], 1),  # the same row updated twice
        ([step("m1", "unknown"), step("m2", "stop", 10)], 0),  # a real finish breaks the run
        ([step("m1", "unknown", output=5)], 0),
        ([step("m1", None)], 0),  # still streaming
        ([step("m1", "unknown", error={"name": "APIError"})], 0),
    ],
)
def test_runaway_counts_empty_unknown_steps(steps, count):
    view = SessionView("ses_a")
    last = 0
    for info in steps:
        last = note_unknown_step(view, info)
    assert last == count


@pytest.mark.parametrize(
    "status, idle_s, tools, permissions, abort, stalled",
    [
        ("busy", 181, set(), set(), None, True),
        ("busy", 179, set(), set(), None, False),
        ("retry", 500, set(), set(), None, False),  # OpenCode is handling it
        ("idle", 500, set(), set(), None, False),
        ("busy", 500, {"call"}, set(), None, False),  # a long tool is progress (R4)
        ("busy", 500, set(), {"per_1"}, None, False),
        ("busy", 500, set(), set(), NOW, False),  # our own abort is on its way
    ],
)
def test_stall(status, idle_s, tools, permissions, abort, stalled):
    view = SessionView("ses_a", owner="b1", status=status,
                       last_activity=NOW - timedelta(seconds=idle_s), tools_running=tools,
                       permissions=permissions, abort_requested=abort)
    assert is_stalled(view, NOW, 180.0) is stalled


def test_stall_needs_a_live_owner():
    view = SessionView("ses_a", status="busy", last_activity=NOW - timedelta(hours=1))
    assert not is_stalled(view, NOW, 180.0)


def test_stall_verdict_names_the_silence():
    view = SessionView("ses_a", last_activity=NOW - timedelta(seconds=200))
    verdict = stall_verdict(view, None, NOW)
    assert (verdict.kind, verdict.retryable, verdict.group) == (Kind.STALL, True,
                                                                BudgetGroup.STALL)
    assert verdict.reason == "busy with no progress for 200 s"


@pytest.mark.parametrize("age_s, kept", [(10, True), (31, False)])
def test_an_abort_that_never_went_through_expires(age_s, kept):
    view = SessionView("ses_a", abort_requested=NOW - timedelta(seconds=age_s))
    expire_abort(view, NOW)
    assert (view.abort_requested is not None) is kept


def test_child_busy_follows_grandchildren_r5():
    sessions = Sessions()
    sessions.set_parent("ses_child", "ses_root")
    sessions.set_parent("ses_grand", "ses_child")
    assert not sessions.live_facts("ses_root").child_busy
    sessions.ensure("ses_grand").status = "busy"
    assert sessions.live_facts("ses_root").child_busy
    sessions.drop_owner("b1")  # unrelated bridge: nothing changes
    assert sessions.live_facts("ses_root").child_busy


def test_settled_live_facts_ignore_a_stale_busy():
    sessions = Sessions()
    sessions.ensure("ses_a").status = "busy"
    assert sessions.live_facts("ses_a").busy
    assert not sessions.live_facts("ses_a", settled=True).busy


def decision(action: Action, kind: Kind, due_s: float, used: int, limit: int) -> Decision:
    return Decision(action, Cause.RETRY, "ses_a", "msg_u", kind=kind,
                    due=NOW + timedelta(seconds=due_s), used_after=used, limit=limit,
                    facts=Facts(note="r"))


@pytest.mark.parametrize(
    "made, text",
    [
        (decision(Action.INJECT_AT, Kind.DISCONNECT, 5, 1, 2),
         "autoretry: connection lost — continuing in 5 s (1/2)"),
        (decision(Action.INJECT, Kind.BLANK, 0, 1, 2),
         "autoretry: blank reply — continuing now (1/2)"),
        (decision(Action.ABORT_THEN_INJECT, Kind.STALL, 0, 2, 2),
         "autoretry: stalled — stopping and continuing now (2/2)"),
        (decision(Action.INJECT_AT, Kind.RATE_LIMIT, 7, 1, 2),
         "autoretry: rate limited — continuing in 7 s (1/2)"),
    ],
)
def test_recovery_toast(made, text):
    assert recovery_toast(made, NOW) == text


def message(mid: str, role: Role, **fields) -> Message:
    return Message(id=mid, session_id="ses_a", role=role, time_created=NOW, **fields)


@pytest.mark.parametrize(
    "steps, expected",
    [
        ((), ("build", "fake", "fake-model", None)),  # no step yet: the user's choice
        ((message("m1", Role.ASSISTANT, agent="plan", provider_id="p2", model_id="m2",
                  variant="high"),), ("plan", "p2", "m2", "high")),  # D21: the last step's
    ],
)
def test_continuation_reuses_agent_and_model_d21(steps, expected):
    user = message("u1", Role.USER, agent="build", provider_id="fake", model_id="fake-model")
    agent, model, variant = continuation_target(Turn("ses_a", user, steps))
    assert (agent, model.provider_id, model.model_id, variant) == expected


def test_continuation_target_of_nothing():
    assert continuation_target(None) == (None, None, None)


def test_a_session_that_is_its_own_parent_is_judged_not_recursed():
    # Issue 20: child_busy recursed through the cycle and every judgement of it failed.
    sessions = Sessions()
    sessions.set_parent("ses_a", "ses_a")
    assert sessions.get("ses_a").parent_id is None
    assert sessions.live_facts("ses_a").child_busy is False


def test_a_cycle_of_parents_ends_and_a_busy_descendant_still_counts():
    sessions = Sessions()
    for child, parent in (("ses_b", "ses_a"), ("ses_c", "ses_b"), ("ses_a", "ses_c")):
        sessions.set_parent(child, parent)
    assert sessions.child_busy("ses_a") is False
    sessions.ensure("ses_c").status = "busy"
    assert sessions.child_busy("ses_a") is True and sessions.child_busy("ses_b") is True


def test_idle_ownerless_views_are_evicted_and_live_ones_kept():
    # Issue 20: session views were never evicted.
    hour = timedelta(hours=1)
    sessions = Sessions()
    sessions.ensure("ses_old").last_activity = NOW
    owned = sessions.ensure("ses_owned")
    owned.owner, owned.last_activity = "b1", NOW
    busy = sessions.ensure("ses_busy")
    busy.status, busy.last_activity = "busy", NOW
    sessions.set_parent("ses_kid", "ses_old")
    sessions.ensure("ses_kid").last_activity = NOW + 5 * hour
    sessions.ensure("ses_never")  # never active: counted from the first pass that saw it
    assert sessions.evict_idle(NOW + 6 * hour, 6 * hour) == ["ses_old"]
    assert sessions.get("ses_old") is None and sessions.get("ses_owned") is not None
    assert sessions.get("ses_busy") is not None and sessions.get("ses_never") is not None
    assert sorted(sessions.evict_idle(NOW + 12 * hour, 6 * hour)) == ["ses_kid", "ses_never"]
    assert {v.session_id for v in sessions} == {"ses_owned", "ses_busy"}
