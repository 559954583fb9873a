"""Steps the daemon aborted itself are reported as what it stopped, not as user aborts."""

from datetime import UTC, datetime, timedelta

import pytest

from opencode_autoretry.diagnostics.records import DaemonRecords
from opencode_autoretry.diagnostics.steps import ClassifiedStep, relabel_daemon_aborts
from opencode_autoretry.models import ErrorInfo, Kind, Message, Role, Turn, Verdict
from opencode_autoretry.store.database import DecisionRecord

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
ABORTED = ErrorInfo("MessageAbortedError", "Aborted")


def step(error=ABORTED, msg_id="msg_2", created=T0, completed=T0 + timedelta(seconds=3)):
    return Message(msg_id, "ses_a", Role.ASSISTANT, created, completed, "msg_1", error=error)


def decision(action="abort_then_inject", kind="stall", msg_id="msg_2", at=T0, session="ses_a"):
    return DecisionRecord(
        id=7, at=at, session_id=session, turn_id="msg_1", message_id=msg_id, kind=kind,
        action=action, reason="stalled 180 s with no progress", group=kind, text=None,
        due=None, used_before=0, used_after=1, limit=2,
    )


def classified(message, kind=Kind.USER_ABORT):
    user = Message("msg_1", "ses_a", Role.USER, T0)
    verdict = Verdict(kind, False, "aborted by the user", message.id, error=message.error)
    return ClassifiedStep(message, Turn("ses_a", user, (message,)), verdict)


@pytest.mark.parametrize(
    ("decisions", "message", "kind"),
    [
        ((decision(),), step(), Kind.STALL),  # the decision names the step
        ((decision(kind="repetition", msg_id="msg_x", at=T0 + timedelta(seconds=1)),),
         step(), Kind.REPETITION),  # within the step's time span
        ((decision(kind="repetition", action="notify", msg_id="msg_2"),), step(),
         Kind.REPETITION),  # out of budget: aborted anyway, then notified
        ((decision(kind="runaway", msg_id="msg_x", at=T0 + timedelta(seconds=7)),), step(),
         Kind.RUNAWAY),  # the abort lands a moment after the step ended
        ((), step(), Kind.USER_ABORT),  # no decision: the user did it
        ((decision(action="skip", kind="disconnect"),), step(), Kind.USER_ABORT),
        ((decision(msg_id="msg_x", at=T0 + timedelta(minutes=5)),), step(), Kind.USER_ABORT),
        ((decision(session="ses_b"),), step(), Kind.USER_ABORT),  # another session
    ],
)
def test_daemon_aborts_are_relabelled(decisions, message, kind):
    (item,) = relabel_daemon_aborts([classified(message)], DaemonRecords(decisions=decisions))
    assert item.verdict.kind is kind
    if kind is not Kind.USER_ABORT:
        assert item.verdict.reason.startswith("aborted by autoretry (decision #7)")


def test_other_verdicts_are_left_alone():
    item = classified(step(error=None), Kind.BLANK)
    (same,) = relabel_daemon_aborts([item], DaemonRecords(decisions=(decision(),)))
    assert same is item
