"""``/autoretry on|off|status [here]`` from inside OpenCode, and the status the CLI shows.

The bridge asks with a ``command`` request and waits at most a second, so answers come from
memory and the store only (no OpenCode DB scans). ``heartbeat_info`` is what the daemon
writes with every heartbeat: ``autoretry status`` renders it, and a restarted daemon reads its
``owners`` back to re-adopt sessions when their process's bridge says hello again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime, tzinfo
from typing import TYPE_CHECKING, Any, Protocol

from opencode_autoretry.causes import Cause
from opencode_autoretry.config.settings import OBSERVE
from opencode_autoretry.daemon.parts import describe
from opencode_autoretry.decisions.caps import caps_line
from opencode_autoretry.decisions.observed import OBSERVE_NOTE
from opencode_autoretry.diagnostics.doctor.recorded import RECORD_KEY
from opencode_autoretry.models import BudgetGroup
from opencode_autoretry.notifications.records import status_json as notify_status
from opencode_autoretry.notifications.records import status_lines as notify_status_lines
from opencode_autoretry.plugin_bridge.protocol import Command, Reply
from opencode_autoretry.store.database import STALE_HEARTBEAT, StoreView
from opencode_autoretry.terminal_text import visible

if TYPE_CHECKING:  # `autoretry status` imports this module: it needs no scheduler
    from opencode_autoretry.config.load import Config
    from opencode_autoretry.daemon.actions import Actions
    from opencode_autoretry.daemon.alerts import WaitingAlerts
    from opencode_autoretry.daemon.gap import GapReview
    from opencode_autoretry.daemon.goals.guard import GoalGuard
    from opencode_autoretry.daemon.parts import PartHealth
    from opencode_autoretry.daemon.sessions import Sessions, SessionView
    from opencode_autoretry.decisions.caps import TurnSpend
    from opencode_autoretry.plugin_bridge.protocol import Hello, Stats
    from opencode_autoretry.store.database import Store


class Loop(Protocol):
    """What the commands and the heartbeat read of the daemon loop (``daemon.loop.Loop``,
    which imports this module: a protocol instead of an import keeps the two acyclic)."""

    @property
    def store(self) -> Store: ...
    @property
    def actions(self) -> Actions: ...
    @property
    def bridges(self) -> dict[str, Hello | None]: ...
    @property
    def sessions(self) -> Sessions: ...
    @property
    def started(self) -> datetime: ...
    @property
    def bridge_stats(self) -> dict[str, Stats]: ...
    @property
    def parts(self) -> PartHealth: ...
    @property
    def gap(self) -> GapReview: ...
    @property
    def _bridge(self) -> object: ...  # the BridgeServer (its line counters), or a test fake
    @property
    def goals(self) -> GoalGuard: ...
    @property
    def config(self) -> Config: ...
    @property
    def spend(self) -> dict[str, tuple[str, TurnSpend]]: ...
    @property
    def alerts(self) -> WaitingAlerts: ...
    @property
    def doctor_line(self) -> Callable[[], Mapping[str, Any] | None]: ...

USAGE = "usage: /autoretry [on|off|status] [here] | goal [<shell command>|off]"


def answer(command: Command, loop: Loop, now: datetime) -> Reply:
    """The reply to ``/autoretry ...``; in observe mode its title says so (issue 23)."""
    return replace(_answer(command, loop, now), title=loop.actions.outbox.title)


def _answer(command: Command, loop: Loop, now: datetime) -> Reply:
    head, _, rest = command.arguments.strip().partition(" ")
    if head.lower() == "goal":  # the command keeps its case and spacing
        return _goal(command, loop, now, rest.strip())
    words = command.arguments.lower().split()
    here = "here" in words
    verbs = [w for w in words if w != "here"] or ["status"]
    session_id = command.session_id if here else None
    if here and not session_id:
        return Reply(id=command.id, ok=False, message="autoretry: no session for 'here'",
                     variant="error")
    if verbs == ["on"] or verbs == ["off"]:
        return _switch(command, loop, now, verbs[0] == "on", session_id)
    if verbs == ["status"]:
        return Reply(id=command.id, ok=True, message=_status_line(loop, command.session_id))
    return Reply(id=command.id, ok=False, message=f"autoretry: {USAGE}", variant="warning")


def _goal(command: Command, loop: Loop, now: datetime, rest: str) -> Reply:
    """``/autoretry goal <cmd>`` sets, ``goal`` shows, ``goal off`` clears (issue 22)."""
    session_id = command.session_id
    if not session_id:
        return Reply(id=command.id, ok=False, message="autoretry: a goal needs a session",
                     variant="error")
    if not rest:
        return Reply(id=command.id, ok=True, message=loop.goals.describe(session_id))
    if rest.lower() == "off":
        return Reply(id=command.id, ok=True, message=loop.goals.clear(session_id, now),
                     variant="warning")
    ok, message = loop.goals.set(session_id, rest, now)
    return Reply(id=command.id, ok=ok, message=message, variant="success" if ok else "error")


def _switch(command: Command, loop: Loop, now: datetime, on: bool, session_id: str | None) -> Reply:
    loop.store.set_enabled(on, now, session_id)
    scope = "this session" if session_id else "all sessions"
    if on:
        return Reply(id=command.id, ok=True, message=f"autoretry on ({scope})", variant="success")
    cancelled = loop.actions.cancel_open(session_id, now, "cancelled: autoretry was switched off")
    extra = f" · {cancelled} pending retr{'y' if cancelled == 1 else 'ies'} cancelled"
    message = f"autoretry off ({scope}){extra if cancelled else ''}"
    return Reply(id=command.id, ok=True, message=message, variant="warning")


def _status_line(loop: Loop, session_id: str | None) -> str:
    enabled = loop.store.is_enabled(session_id)
    parts = ["on" if enabled else "off", "daemon up", f"{len(loop.bridges)} bridge(s)"]
    if loop.actions.observe:
        parts.insert(1, OBSERVE_NOTE)
    if session_id:
        turn_id = loop.store.current_turn(session_id)
        ledger = loop.store.load_ledger(session_id, turn_id) if turn_id else None
        if ledger is not None and ledger.used:
            used = ", ".join(f"{g} {n}" for g, n in sorted(ledger.used.items()))
            parts.append(f"this turn: {used}")
            if ledger.exhausted:
                parts.append("exhausted: " + ", ".join(sorted(ledger.exhausted)))
        pending = loop.actions.pending.get(session_id)
        if pending is not None and pending.group is BudgetGroup.QUOTA:
            parts.append(f"waiting for the quota reset (continuing at {pending.due:%H:%M:%S} "
                         "UTC; any message cancels it)")
        elif pending is not None:
            parts.append(f"retry pending ({pending.group}, due {pending.due:%H:%M:%S} UTC)")
        parts += _goal_and_spend(loop, session_id, turn_id)
    return "autoretry: " + " · ".join(parts)


def _goal_and_spend(loop: Loop, session_id: str, turn_id: str | None) -> list[str]:
    """The session's goal, and its turn's spend against the caps (issue 22)."""
    parts = []
    goal = loop.store.active_goal(session_id)
    caps = loop.config.caps
    if goal is not None:
        parts.append(f"goal `{goal.command}`")
        caps = loop.config.goal.caps(caps)
    spent = loop.spend.get(session_id)
    if spent is not None and (turn_id is None or spent[0] == turn_id) and (
            caps.any or goal is not None):
        parts.append(caps_line(spent[1], caps))
    return parts


def heartbeat_info(loop: Loop, stopping: bool = False) -> dict[str, Any]:
    bridges = []
    for conn_id, hello in loop.bridges.items():
        entry: dict[str, Any] = {"conn": conn_id}
        if hello is not None:
            entry.update(pid=hello.pid, directory=hello.directory, url=hello.server_url,
                         opencode=hello.opencode, bridge=hello.bridge)
        stats = loop.bridge_stats.get(conn_id)
        if stats is not None:  # what the bridge itself dropped: events (queue full), bad lines
            entry.update(dropped=stats.dropped, unknown=stats.unknown or 0)
        bridges.append(entry)
    pids = {conn: hello.pid for conn, hello in loop.bridges.items() if hello is not None}
    views = list(loop.sessions)
    waiting = loop.gap.carried()  # a gap this daemon had not closed yet outlives it too
    return {
        "started": loop.started.isoformat(),
        "stopping": stopping,
        "mode": OBSERVE if loop.actions.observe else "act",  # issue 23
        "bridges": bridges,
        "owners": {**{s: w.pid for s, w in waiting.items()},
                   **{v.session_id: pids[v.owner] for v in views if v.owner in pids}},
        "gap_since": {s: w.since.isoformat() for s, w in waiting.items()},
        "sessions": {v.session_id: _session_entry(v, loop.alerts) for v in views},
        "no_owner": sorted(v.session_id for v in views if v.owner is None),
        "parts": loop.parts.report(),  # issue 11: the parts that do not work right now
        "lines": _line_counters(loop),
        # issue 21: doctor's line, which `diagnose` prints while it holds (doctor/recorded.py)
        **({RECORD_KEY: record} if (record := loop.doctor_line()) is not None else {}),
    }


def _session_entry(view: SessionView, alerts: WaitingAlerts) -> dict[str, Any]:
    """What ``status`` shows of a session: its status, owner and what it waits on (the asks
    only the user can answer: their kinds, and what each asks since when, issue 23)."""
    entry: dict[str, Any] = {"status": view.status, "owner": view.owner}
    waiting = [name for name, asks in (("permission", view.permissions),
                                       ("question", view.questions)) if asks]
    if waiting:
        entry["waiting"] = waiting
        asked = alerts.asked(view.session_id)
        if asked:
            entry["asked"] = [{"kind": a.kind, "what": a.what, "since": a.since.isoformat()}
                              for a in asked]
    return entry


def _line_counters(loop: Loop) -> dict[str, int]:
    """The bridge server's read/dropped line counts (``doctor`` and ``status`` show them);
    a fake bridge in the unit tests has none."""
    counters = getattr(loop._bridge, "counters", None)  # the BridgeServer
    return dict(vars(counters())) if callable(counters) else {}


# -- `autoretry status` (CLI, read-only) ------------------------------------------------------


def status_report(view: StoreView, now: datetime, decisions: int = 10,
                  mode: str = "act") -> dict[str, Any]:
    """Everything ``autoretry status`` prints, as one JSON-able mapping. ``mode``: the
    configured one, shown while no daemon runs (a running daemon says its own)."""
    beat = view.heartbeat()
    info: Mapping[str, Any] = beat.info if beat is not None else {}
    age = (now - beat.at).total_seconds() if beat is not None else None
    running = beat is not None and not info.get("stopping") and age is not None and (
        age <= STALE_HEARTBEAT.total_seconds())
    return {
        "enabled": view.is_enabled(),
        "mode": str(info.get("mode", mode)) if running else mode,
        "switches": view.switches(),
        "daemon": {"running": running, "pid": beat.pid if beat else None,
                   "heartbeat_age_s": None if age is None else round(age, 1),
                   "started": info.get("started")},
        "bridges": list(info.get("bridges", [])),
        "bridge_lines": dict(info.get("lines", {})),  # read and dropped by the daemon
        "sessions": dict(info.get("sessions", {})),
        "no_owner": list(info.get("no_owner", [])),
        "problems": dict(info.get("parts", {})) if running else {},
        "turns": [
            {"session_id": ledger.session_id, "turn_id": ledger.turn_id,
             "used": {str(k): v for k, v in ledger.used.items()},
             "exhausted": sorted(str(g) for g in ledger.exhausted),
             "user_aborted": ledger.user_aborted}
            for ledger in view.ledgers()[-decisions:]
        ],
        "pending": _pending(view),
        "decisions": [
            {"id": d.id, "at": d.at.isoformat(), "session_id": d.session_id, "kind": d.kind,
             "action": d.action, "reason": d.reason, "observed": d.observed, "would": d.would}
            for d in view.decisions()[-decisions:]
        ],
        "notifications": notify_status(view, now),  # issue 10
        "goals": [  # issue 22: the goals still active
            {"id": g.id, "session_id": g.session_id, "command": g.command, "turn_id": g.turn_id,
             "set_at": g.set_at.isoformat(),
             "checks": len(view.goal_checks(goal_id=g.id))}
            for g in view.goals(active=True)
        ],
    }


def _pending(view: StoreView) -> list[dict[str, Any]]:
    """Open continuations; a quota wait (issue 23) says so, with the reset it waits for."""
    open_ones = [i for i in view.injections() if i.state in ("intent", "sent")]
    quota = {d.id: d for d in view.decisions() if d.cause is Cause.QUOTA_WAIT} if open_ones else {}
    pending = []
    for i in open_ones:
        entry: dict[str, Any] = {"id": i.id, "session_id": i.session_id, "state": i.state,
                                 "text": i.text, "due": i.due.isoformat() if i.due else None}
        waits = quota.get(i.decision_id)
        if waits is not None and waits.facts.resets_at is not None:
            entry["quota_resets_at"] = waits.facts.resets_at.isoformat()
        pending.append(entry)
    return pending


def _dropped(report: Mapping[str, Any]) -> str:
    counts = report.get("bridge_lines", {})
    bad = {k: v for k, v in counts.items() if k != "lines" and v}
    if not bad:
        return ""
    return " · lines dropped: " + ", ".join(f"{k} {v}" for k, v in sorted(bad.items()))


def local_time(iso: str | None, zone: tzinfo | None = None) -> str:
    """An ISO time from the report (UTC) as the other reports show times: local, to the second
    (``zone`` None: the machine's zone)."""
    if not iso:
        return "-"
    return datetime.fromisoformat(iso).astimezone(zone).strftime("%Y-%m-%d %H:%M:%S")


def render_status(report: Mapping[str, Any], zone: tzinfo | None = None) -> str:
    """The text of ``autoretry status``, times in local time (``--json`` keeps them UTC)."""
    daemon = report["daemon"]
    observing = report.get("mode") == OBSERVE
    lines = [
        f"autoretry is {'on' if report['enabled'] else 'OFF'}"
        + (f" — OBSERVE MODE ({OBSERVE_NOTE.partition(': ')[2]})" if observing else ""),
        "daemon: " + (f"running (pid {daemon['pid']}, heartbeat {daemon['heartbeat_age_s']} s ago,"
                      f" started {local_time(daemon['started'], zone)})"
                      if daemon["running"] else "not running"),
    ]
    off = [scope for scope, on in report["switches"].items() if not on and scope != "*"]
    if off:
        lines.append("off for sessions: " + ", ".join(off))
    lines += describe(report.get("problems", {}))
    lines.append(f"bridges: {len(report['bridges'])}{_dropped(report)}")
    lines += [f"  pid {b.get('pid')}  {b.get('directory')}  {b.get('url') or '-'}"
              + (f"  (dropped {b['dropped']} events, {b['unknown']} bad lines)"
                 if b.get("dropped") or b.get("unknown") else "")
              for b in report["bridges"]]
    lines.append(f"watched sessions: {len(report['sessions'])}")
    lines += [f"  {sid}  {s.get('status') or '?'}{_waiting_text(s, zone)}"
              for sid, s in report["sessions"].items()]
    if report["no_owner"]:
        lines.append("no live owner (never injected): " + ", ".join(report["no_owner"]))
    lines.append(f"turns: {len(report['turns'])}")
    for t in report["turns"]:
        used = ", ".join(f"{g} {n}" for g, n in t["used"].items()) or "nothing spent"
        spent = f"  exhausted: {', '.join(t['exhausted'])}" if t["exhausted"] else ""
        lines.append(f"  {t['session_id']} {t['turn_id']}: {used}{spent}")
    lines.append(f"pending retries: {len(report['pending'])}")
    lines += [f"  #{p['id']} {p['session_id']} {p['state']} due {local_time(p['due'], zone)}"
              + (f"  (waiting for the quota reset at {local_time(p['quota_resets_at'], zone)})"
                 if p.get("quota_resets_at") else "")
              for p in report["pending"]]
    lines.append("last decisions:")
    lines += [f"  {local_time(d['at'], zone)} {d['session_id']} {d['kind'] or '-'}: "
              f"{d.get('would') or d['reason']}" for d in report["decisions"]]
    if "notifications" in report:
        lines += notify_status_lines(report["notifications"])
    goals = report.get("goals") or []
    lines.append(f"active goals: {len(goals)}")
    lines += [f"  {g['session_id']}  `{visible(str(g['command']))}`  {g['checks']} check(s), "
              f"set {local_time(g['set_at'], zone)}" for g in goals]
    return "\n".join(lines)


def _waiting_text(entry: Mapping[str, Any], zone: tzinfo | None = None) -> str:
    waiting = entry.get("waiting")
    if not isinstance(waiting, list) or not waiting:
        return ""
    asked = entry.get("asked")
    if isinstance(asked, list) and asked and all(isinstance(a, Mapping) for a in asked):
        return "  waiting on the user: " + "; ".join(
            f"{visible(str(a.get('kind')))} ({visible(str(a.get('what')))}) since "
            f"{local_time(str(a.get('since')), zone)}" for a in asked)
    return "  waiting on the user: " + ", ".join(str(w) for w in waiting)
