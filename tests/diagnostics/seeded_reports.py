"""The seeded OpenCode DB (rows shaped like reference §2.3-2.6) and daemon store the report
tests read: ``seed`` builds them, ``NOW`` is the reports' fixed clock. The fixtures that hand
them to the tests are in conftest.py."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from opencode_rows import (
    BASE_MS,
    OpenCodeRows,
    aborted_error,
    api_error,
    tokens,
)

from opencode_autoretry.causes import Cause, Facts
from opencode_autoretry.models import Action, BudgetGroup, Decision, Kind
from opencode_autoretry.store.database import Store

NOW = datetime.fromtimestamp(BASE_MS / 1000, tz=UTC) + timedelta(days=1)
OLD_MS = BASE_MS - 10 * 86_400_000  # outside "diagnose 7"


@dataclass
class Seeded:
    """Paths and the ids the tests assert on (``steps[name]`` = assistant message id)."""

    db: Path
    store: Path
    sessions: dict[str, str] = field(default_factory=dict)
    steps: dict[str, str] = field(default_factory=dict)
    users: dict[str, str] = field(default_factory=dict)


def _decide(store: Store, sid: str, turn: str, kind: Kind, trigger: str, at: datetime) -> int:
    group = BudgetGroup.BLANK if kind is Kind.BLANK else BudgetGroup.DISCONNECT
    decision = Decision(
        Action.INJECT, Cause.RETRY, sid, turn, kind, group, "Continue.", None, 0, 1, 2,
        facts=Facts(note=f"{kind} → continue"),
    )
    return store.record_decision(decision, at, message_id=trigger)


def _inject(rows: OpenCodeRows, store: Store, sid: str, turn: str, kind: Kind, trigger: str) -> str:
    at = datetime.fromtimestamp(rows.clock / 1000, tz=UTC)
    decision_id = _decide(store, sid, turn, kind, trigger, at)
    injection_id = store.record_intent(decision_id, sid, turn, "Continue.", None, at=at)
    store.mark_sent(injection_id, at)
    mid = rows.injected(sid, decision=decision_id, kind=str(kind), injection=injection_id)
    store.mark_confirmed(injection_id, at, mid)
    return mid


def seed(tmp: Path) -> Seeded:
    rows = OpenCodeRows(tmp / "opencode.db", start_ms=OLD_MS)
    store = Store.open(tmp / "autoretry.db")
    seeded = Seeded(tmp / "opencode.db", tmp / "autoretry.db")
    s, st, us = seeded.sessions, seeded.steps, seeded.users

    s["old"] = rows.session("dusty-attic")
    us["old"] = rows.user(s["old"])
    st["old_blank"] = rows.assistant(s["old"], us["old"], toks=tokens(100, 0), text=None)

    rows.clock = BASE_MS
    s["main"] = sid = rows.session("swift-planet")
    us["hello"] = rows.user(sid, "Say hello")
    st["healthy"] = rows.assistant(sid, us["hello"])
    us["blank"] = turn = rows.user(sid, "Write the report")
    st["blank"] = rows.assistant(sid, turn, toks=tokens(100, 0), text=None)
    us["inj_blank"] = _inject(rows, store, sid, turn, Kind.BLANK, st["blank"])
    st["recovered"] = rows.assistant(sid, us["inj_blank"], toks=tokens(120, 42))
    us["reset"] = turn = rows.user(sid, "Fix the tests")
    reset = api_error("Connection reset by server", code="ECONNRESET")
    st["disconnect"] = rows.assistant(sid, turn, finish=None, error=reset, text="")
    us["inj_reset"] = _inject(rows, store, sid, turn, Kind.DISCONNECT, st["disconnect"])
    limited = api_error("Rate limit exceeded (fake)", status=429, headers={"retry-after": "2"})
    st["rate_limit"] = rows.assistant(sid, us["inj_reset"], finish=None, error=limited, text="")
    us["length"] = turn = rows.user(sid)
    st["forged_length"] = rows.assistant(sid, turn, finish="length", toks=tokens(100, 0), text=None)
    us["think"] = turn = rows.user(sid)
    st["think_only"] = rows.assistant(
        sid, turn, toks=tokens(100, 0, reasoning=4), text=None, reasoning="Let me think."
    )
    us["toolish"] = turn = rows.user(sid)
    st["tool_as_text"] = rows.assistant(
        sid, turn, toks=tokens(100, 20), text='<function_calls><invoke name="bash">ls</invoke>'
    )
    us["abort"] = turn = rows.user(sid)
    st["user_abort"] = rows.assistant(sid, turn, finish=None, error=aborted_error(), text="partial")

    s["child"] = rows.session("lucky-sailor", parent_id=sid, title="Fake subtask")
    us["child"] = rows.user(s["child"])
    boom = api_error("Internal Server Error", status=500)
    st["server_error"] = rows.assistant(s["child"], us["child"], finish=None, error=boom, text="")

    s["loop"] = rows.session("brave-otter")
    us["loop"] = rows.user(s["loop"])
    for index in range(7):
        st[f"loop{index}"] = rows.assistant(
            s["loop"], us["loop"], finish="unknown", toks=tokens(0, 0), text=""
        )

    s["quiet"] = rows.session("calm-river")
    us["silent"] = rows.user(s["quiet"])
    st["silent"] = rows.assistant(s["quiet"], us["silent"], finish=None, text="")
    us["orphan"] = rows.user(s["quiet"])
    st["orphan"] = rows.assistant(s["quiet"], us["orphan"], finish=None, text="", completed=False)

    s["net"] = rows.session("misty-lake")
    us["net"] = net = rows.user(s["net"])
    stalled = api_error("SSE read timed out", code="ProviderResponseStreamError")
    st["timeout"] = rows.assistant(s["net"], net, finish=None, error=stalled, text="")
    us["net2"] = net = rows.user(s["net"])
    cut = api_error("JSON Parse error: Unterminated string")
    st["stream_truncated"] = rows.assistant(s["net"], net, finish=None, error=cut, text="")
    us["net3"] = net = rows.user(s["net"])
    denied = api_error("Invalid API key (fake)", status=401, retryable=False)
    st["terminal"] = rows.assistant(s["net"], net, finish=None, error=denied, text="")

    at = datetime.fromtimestamp(rows.clock / 1000, tz=UTC)
    store.record_decision(
        Decision(
            Action.SKIP, Cause.NO_OWNER, s["quiet"], us["silent"], Kind.SILENT,
            facts=Facts(note="no live owner: nobody to send it"),
        ),
        at,
        message_id=st["silent"],
    )
    store.record_decision(
        Decision(
            Action.NOTIFY,
            Cause.BUDGET_SPENT,
            sid,
            us["reset"],
            Kind.RATE_LIMIT,
            BudgetGroup.RATE_LIMIT,
            None,
            None,
            2,
            2,
            2,
            facts=Facts(note="rate_limit budget exhausted (2/2)"),
        ),
        at,
        message_id=st["rate_limit"],
    )
    store.beat(NOW - timedelta(seconds=30), 4242, {"version": "0.1.0"})
    rows.event(sid, "message.updated.1", {"sessionID": sid, "info": {"id": st["healthy"]}})
    rows.event(sid, "message.part.updated.1", {"sessionID": sid})
    rows.commit()
    store.close()
    seeded.rows = rows  # type: ignore[attr-defined]  # kept open: -wal and -shm stay, like a live OpenCode
    return seeded


def closed_seed(tmp: Path) -> Seeded:
    """The seeded DB, closed as OpenCode leaves it between writes, for reports run as processes
    (an open writer keeps a write-ahead log the report index would catch up with every run)."""
    found = seed(tmp)
    found.rows.close()  # type: ignore[attr-defined]
    return found


def probe_env(home: Path) -> dict[str, str]:
    """What a report process sees of the user's set-up: UTC, no colour, ``home`` with no
    config file (so no bridge installed and the default settings)."""
    return {"TZ": "UTC", "NO_COLOR": "1", "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / "config"),
            "AUTORETRY_CONFIG": str(home / "no-config.toml")}


def process_env(home: Path) -> dict[str, str]:
    """This process's environment without autoretry's and OpenCode's variables, plus
    ``probe_env(home)``: the environment a report run as a process gets."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AUTORETRY_", "OPENCODE_"))}
    env.update(probe_env(home))
    return env
