"""The soak's checker (tests/e2e/soak_checks.py) on hand-made rows: each invariant catches its
violation and passes its good case (issue 11)."""

from __future__ import annotations

import random
from dataclasses import replace

from soak_checks import (
    DecisionRow,
    Floor,
    InjectionRow,
    MessageRow,
    Observed,
    PlannedTurn,
    SessionRow,
    check,
    check_floor,
    figures,
    segments,
    table,
)
from soak_plan import (
    BY_NAME,
    MENU,
    Expect,
    draw,
    first_draws,
    lane_rng,
    menu,
    prompt_text,
    tag_of,
)

LIMITS = {"blank": 2, "disconnect": 2, "rate_limit": 2, "length": 3, "unknown": 2}
GROUPS = frozenset({"disconnect", "rate_limit", "unknown"})


def user(mid: str, tag: str | None = None, fault: str = "healthy", injection: int | None = None,
         session: str = "s1") -> MessageRow:
    text = prompt_text(tag, BY_NAME[fault]) if tag else "Continue."
    return MessageRow(mid, session, "user", text=text, injection=injection)


def answer(mid: str, finish: str | None = "stop", error: str | None = None,
           session: str = "s1") -> MessageRow:
    return MessageRow(mid, session, "assistant", finish=finish, error=error)


def send(did: int, turn: str, kind: str, group: str, used: int = 1, action: str = "inject",
         session: str = "s1") -> DecisionRow:
    return DecisionRow(did, session, turn, kind, action, f"{action}: {kind}", group, used, 2)


def injection(iid: int, did: int, turn: str, state: str = "confirmed",
              session: str = "s1") -> InjectionRow:
    return InjectionRow(iid, did, session, turn, state)


def observed(plan, messages, decisions=(), injections=(), sessions=None, **extra) -> Observed:
    sessions = sessions or [SessionRow("s1", None)]
    return Observed(plan=plan, sessions=sessions, messages=messages, decisions=decisions,
                    injections=injections, group_limits=LIMITS, interruption_groups=GROUPS,
                    **extra)


def recovered_blank() -> Observed:
    return observed(
        [PlannedTurn("t0x0", "s1", "blank")],
        [user("m1", "t0x0", "blank"), answer("m2"), user("m3", injection=1), answer("m4")],
        [send(1, "m1", "blank", "blank")],
        [injection(1, 1, "m1")],
        provider_continuations={"t0x0": 1},
    )


def rules(found) -> list[str]:
    return [v.rule for v in found]


def test_a_recovered_fault_passes():
    assert check(recovered_blank()) == []


def test_a_fault_left_unrecovered_is_a_violation():
    base = recovered_blank()
    bare = replace(base, messages=base.messages[:2], decisions=[], injections=[],
                   provider_continuations={})
    [found, *more] = check(bare)
    assert found.rule == "turn outcome" and "not recovered" in found.detail
    assert any("no send decision" in v.detail for v in more)  # the lost decision


def test_a_loop_recovered_as_a_stall_passes_only_when_the_daemon_lost_its_stream():
    def loop_turn(stream_lost: bool) -> Observed:
        return observed(
            [PlannedTurn("t0x0", "s1", "repetition_loop", stream_lost=stream_lost)],
            [user("m1", "t0x0", "repetition_loop"), answer("m2", finish=None),
             user("m3", injection=1), answer("m4")],
            [send(1, "m1", "stall", "stall", action="abort_then_inject")],
            [injection(1, 1, "m1")],
            provider_continuations={"t0x0": 1},
        )

    [found] = check(loop_turn(stream_lost=False))
    assert found.rule == "turn outcome"
    assert "no send decision of kind ['repetition']" in found.detail
    assert check(loop_turn(stream_lost=True)) == []
    blank = replace(recovered_blank(), decisions=[send(1, "m1", "stall", "stall")])
    blank = replace(blank, plan=[replace(blank.plan[0], stream_lost=True)])
    assert "turn outcome" in rules(check(blank))  # only a fault that says so allows it


def test_a_doubled_continuation_is_caught_three_ways():
    base = recovered_blank()
    doubled = replace(base, messages=[*base.messages, user("m5", injection=1), answer("m6")])
    found = check(doubled)
    assert "doubled continuation" in rules(found)
    assert any("2 continuations for one fault" in v.detail for v in found)


def test_a_second_injection_for_one_decision_is_caught():
    base = recovered_blank()
    twice = replace(base, injections=[*base.injections, injection(2, 1, "m1")])
    assert "doubled injection" in rules(check(twice))


def test_sent_to_a_healthy_turn_or_to_a_child_is_caught():
    plan = [PlannedTurn("t0x0", "s1", "subagent_blank")]
    messages = [user("m1", "t0x0", "subagent_blank"), answer("m2"), user("m3", injection=7),
                answer("m4"), MessageRow("c1", "c", "user", text="Do the subtask"),
                answer("c2", session="c"), MessageRow("c3", "c", "user", injection=8)]
    sessions = [SessionRow("s1", None), SessionRow("c", "s1")]
    injections = [injection(7, 1, "m1"), injection(8, 2, "c1", session="c")]
    found = check(observed(plan, messages, (), injections, sessions=sessions))
    assert {"turn outcome", "sent to a child", "injection for a child"} <= set(rules(found))


def test_a_user_abort_must_be_decided_and_left_alone():
    plan = [PlannedTurn("t0x0", "s1", "user_abort")]
    messages = [user("m1", "t0x0", "user_abort"), answer("m2", None, "MessageAbortedError")]
    skip = DecisionRow(1, "s1", "m1", "user_abort", "skip", "skip: user aborted this turn")
    assert check(observed(plan, messages, [skip])) == []
    assert "no decision to leave it alone" in check(observed(plan, messages))[0].detail


def test_a_message_in_the_backoff_beats_the_retry():
    plan = [PlannedTurn("t0x0", "s1", "message_in_backoff"), PlannedTurn("t0x0f", "s1", "healthy")]
    decided = [send(1, "m1", "disconnect", "disconnect", action="inject_at")]
    cancelled = [injection(1, 1, "m1", state="cancelled")]
    messages = [user("m1", "t0x0", "message_in_backoff"), answer("m2", None, "APIError"),
                user("m3", "t0x0f"), answer("m4")]
    assert check(observed(plan, messages, decided, cancelled)) == []
    late = [*messages, user("m5", injection=1), answer("m6")]  # sent after the user's message
    found = check(observed(plan, late, decided, [injection(1, 1, "m1")]))
    assert any("t0x0f" in v.where and "nothing belongs" in v.detail for v in found)


def test_budget_overruns_and_the_interruption_cap():
    plan = [PlannedTurn("t0x0", "s1", "disconnect")]
    decided = [send(1, "m1", "disconnect", "disconnect", 1),
               send(2, "m1", "rate_limit", "rate_limit", 1),
               send(3, "m1", "disconnect", "disconnect", 3)]
    found = check(observed(plan, [user("m1", "t0x0", "disconnect")], decided))
    assert rules(found).count("budget overrun") == 1  # decision 3: 3 of 2
    assert "interruption cap" in rules(found)


def test_open_injections_unrecorded_ones_and_the_provider_log():
    base = recovered_blank()
    left = replace(base, injections=[injection(1, 1, "m1", state="sent")])
    assert "left open" in rules(check(left))
    unknown = replace(base, injections=[])
    assert "unrecorded continuation" in rules(check(unknown))
    more = replace(base, provider_continuations={"t0x0": 2})
    assert "provider saw more" in rules(check(more))


def test_daemon_crashes_and_a_missing_turn():
    base = recovered_blank()
    assert "daemon crash" in rules(check(replace(base, daemon_exits=[0, 1])))
    assert "daemon crash" in rules(check(replace(base, daemon_tracebacks=1)))
    assert check(replace(base, daemon_exits=[0])) == []
    missing = replace(base, plan=[*base.plan, PlannedTurn("t0x1", "s1", "healthy")])
    assert "turn missing" in rules(check(missing))


def test_segments_split_on_real_user_messages_only():
    base = recovered_blank()
    [turn] = segments(base.messages)["s1"]
    assert turn.opener.id == "m1" and len(turn.injected) == 1 and turn.ends_clean


def test_the_menu_and_the_tags():
    assert tag_of(prompt_text("t3x12f", BY_NAME["blank"])) == "t3x12f"
    assert tag_of("<wrapped>Soak turn t1x0: say hello</wrapped>") == "t1x0"
    assert tag_of("Continue.") is None
    assert not any(f.slow for f in menu(short=True)) and any(f.slow for f in menu(short=False))
    kinds = {f.expect for f in MENU}
    assert kinds == set(Expect)
    rng = random.Random(1)
    assert [draw(rng, MENU).name for _ in range(5)] == [
        draw(r, MENU).name for r in [random.Random(1)] for _ in range(5)
    ]


def test_the_figures_table():
    base = recovered_blank()
    rows = figures(base, [], {"daemon SIGKILLs survived": 2})
    text = table(rows)
    assert "| turns recovered (of those that needed it) | 1 / 1 |" in text
    assert "chaos: daemon SIGKILLs survived" in text and "| violations" in text


def test_provider_continuations_count_user_messages_after_the_latest_tag():
    from fake_provider import ProviderRequest
    from soak_observe import provider_continuations

    def request(*users: str) -> ProviderRequest:
        messages = [{"role": "user", "content": [{"type": "text", "text": u}]} for u in users]
        return ProviderRequest(0.0, "/v1/chat/completions", "fake-model", messages, "normal",
                               False, True)

    seen = provider_continuations([
        request("Soak turn t0x0: say hello"),
        request("Soak turn t0x0: say hello", "Continue."),
        request("Soak turn t0x0: say hello", "Continue.", "Soak turn t0x1: say hello"),
        request("Do the subtask [[s:blank]]"),  # a child's request: no tag, not counted
    ])
    assert seen == {"t0x0": 1, "t0x1": 0}


FULL_CHAOS = {"daemon SIGKILLs survived": 2, "bridge sockets cut mid-line": 2}


def a_run(turns: int) -> list[PlannedTurn]:
    """``turns`` turns cycling through one fault of each family."""
    faults = ["blank", "healthy", "unauthorized", "message_in_backoff"]
    return [PlannedTurn(f"t0x{n}", "s1", faults[n % len(faults)]) for n in range(turns)]


def test_a_run_that_did_too_little_fails_its_floor():
    floor = Floor(turns=8, families={"recover": 2, "cancel": 2}, chaos=FULL_CHAOS)
    assert check_floor(a_run(8), FULL_CHAOS, floor) == []
    few = check_floor(a_run(5), {"daemon SIGKILLs survived": 1}, floor)
    assert set(rules(few)) == {"too little happened"}
    wheres = {v.where for v in few}
    assert wheres == {"turns", "cancel turns", "daemon SIGKILLs survived",
                      "bridge sockets cut mid-line"}, few
    assert any(v.detail == "5 turns, at least 8 expected" for v in few)


def test_the_soak_floor_follows_from_the_seed_and_the_time():
    from soak_driver import SoakOptions, floor_of

    options = SoakOptions(seed=11, seconds=35.0, lanes=8, short=True)
    floor = floor_of(options)
    assert floor.turns == 23  # 8 lanes x 35 s at one turn per 12 lane-seconds; 39 is the least seen
    drawn = first_draws(11, 8, options.faults, 2)  # every lane plays 2 turns in 35 s
    assert sum(floor.families.values()) == len(drawn) == 16
    assert set(floor.families) == {e.value for e in Expect}  # seed 11 draws every family
    assert floor.chaos == {"daemon SIGKILLs survived": 2, "OpenCode restarts survived": 1,
                           "bridge sockets cut mid-line": 2}
    # A run that played just the floor's first draws passes it; one turn less of a family fails.
    plan = [PlannedTurn(f"t{n}", "s1", f.name) for n, f in enumerate(drawn)]
    plan += [PlannedTurn(f"e{n}", "s1", "healthy") for n in range(floor.turns - len(plan))]
    chaos = dict(floor.chaos)
    assert check_floor(plan, chaos, floor) == []
    no_cancel = [p for p in plan if BY_NAME[p.fault].expect is not Expect.CANCEL]
    no_cancel += [PlannedTurn("x", "s1", "healthy")] * (len(plan) - len(no_cancel))
    assert [v.where for v in check_floor(no_cancel, chaos, floor)] == ["cancel turns"]
    # The lanes draw what the driver draws.
    assert draw(lane_rng(11, 3), options.faults) is drawn[2 * 3]
