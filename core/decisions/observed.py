"""PURE: what a decision taken in observe mode would have done, in words (issue 23).

Observe mode (``mode = "observe"``) judges and records every decision as in act mode, but
carries none out. The reports, the toasts and ``autoretry exec`` say what it WOULD have done,
rendered here from the decision's typed fields (action, kind, cause, facts, counts), never
from its reason text: "would continue: blank reply (1/3)".
"""

from __future__ import annotations

from opencode_autoretry.causes import Cause, Facts
from opencode_autoretry.decisions.kind_labels import kind_label
from opencode_autoretry.models import Action, Decision, Kind

#: The title every toast and command reply carries in observe mode.
OBSERVE_TITLE = "autoretry · observe mode"
#: What observe mode means, for ``status``, ``/autoretry status`` and exec.
OBSERVE_NOTE = "observe mode: decisions are recorded, nothing is sent, aborted or switched"

def would_do(
    action: Action | str, kind: Kind | str | None, cause: Cause, facts: Facts,
    used_after: int = 0, limit: int = 0,
) -> str | None:
    """What an observed decision would have done ('would continue: blank reply (1/3)'), or
    None for a decision not to act (a skip reads the same in both modes)."""
    what = kind_label(kind)
    count = f" ({used_after}/{limit})" if limit else ""
    act = Action(str(action))
    if act is Action.SKIP:
        return None
    if act is Action.ABORT:
        return f"would abort the hung subagent: {facts.detail or what}"
    if act is Action.NOTIFY:
        return f"would give up: {what}{count}; would tell you and wait for your message"
    if cause is Cause.MODEL_SWITCH and facts.switch is not None:
        switch = facts.switch
        return (f"would switch {switch.from_model} → {switch.to_model} and continue: "
                f"{switch.why or what}{count}")
    if act is Action.ABORT_THEN_INJECT:
        return f"would stop and continue: {what}{count}"
    delay = f" in {facts.delay_s:.0f} s" if facts.delay_s and facts.delay_s >= 0.5 else ""
    return f"would continue{delay}: {what}{count}"


def would_of(decision: Decision) -> str | None:
    return would_do(decision.action, decision.kind, decision.cause, decision.facts,
                    decision.used_after, decision.limit)


def observe_toast(decision: Decision) -> str | None:
    """The toast of an observed decision (None: a skip, which shows none in act mode too)."""
    would = would_of(decision)
    return None if would is None else f"autoretry (observe mode): {would} — nothing done"
