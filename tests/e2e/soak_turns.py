"""How the soak plays one turn of each kind (issue 11), and when a turn is over.

A ``Lane`` is one root session on one OpenCode process. ``play`` sends the turn's prompt (and,
for the interactive kinds, the abort, the permission answer, the user's message in a back-off or
the `/autoretry off|on here` commands) and returns once the turn has settled: the session is
idle, the daemon holds no open injection for it, and what the fault must lead to is in OpenCode's
DB or the daemon's store. Every wait is for that event, bounded, with a message that says what
did not happen; the checker judges the outcome afterwards.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from daemon_process import DaemonProcess, wait_until
from fake_provider import FakeProvider
from opencode import OpenCodeServer
from soak_chaos import Gate
from soak_checks import PlannedTurn, Segment, segments
from soak_observe import read_session
from soak_plan import BY_NAME, Expect, Fault, How, prompt_text, tag_of

from opencode_autoretry.store.database import StoreView

SETTLE_S = 180.0  # a slow fault (~70 s of OpenCode's own retries) plus a daemon restart or two
STEP_S = 60.0  # one interactive step: the provider got the prompt, a permission was asked...


@dataclass
class Process:
    """One ``opencode serve``; ``server`` is replaced when the soak restarts it."""

    name: str
    socket: Path  # what its bridge connects to (the daemon's socket or a proxy's)
    server: OpenCodeServer
    gate: Gate = field(default_factory=Gate)


@dataclass
class Lane:
    index: int
    session: str
    process: Process


@dataclass
class Soaking:
    """What every turn needs: the parts, and the plan being written."""

    daemon: DaemonProcess
    provider: FakeProvider
    opencode_db: Path
    stall_timeout: float
    plan: list[PlannedTurn] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    notes: Counter[str] = field(default_factory=Counter)  # how chaos met the turns

    def planned(self, tag: str, session: str, fault: Fault) -> None:
        with self.lock:
            self.plan.append(PlannedTurn(tag, session, fault.name))

    def stream_lost(self, tag: str) -> None:
        """The daemon lost its live view of turn ``tag`` while it ran (``_forgot``)."""
        with self.lock:
            self.plan = [replace(p, stream_lost=True) if p.tag == tag else p for p in self.plan]
            self.notes["turns whose live stream the daemon lost (cut or restart)"] += 1

    def note(self, what: str) -> None:
        with self.lock:
            self.notes[what] += 1

    def store(self) -> StoreView:
        return self.daemon.store()


def _read(soak: Soaking, fn: Callable[[StoreView], Any]) -> Any:
    view = soak.store()
    try:
        return fn(view)
    finally:
        view.close()


def segment(soak: Soaking, session: str, tag: str) -> Segment | None:
    turns = segments(read_session(soak.opencode_db, session)).get(session, [])
    return next((s for s in turns if tag_of(s.opener.text) == tag), None)


def _busy(server: OpenCodeServer, session: str) -> bool:
    status = server.ok("GET", "/session/status") or {}
    return bool(status.get(session, {}).get("type") not in (None, "idle"))


def _decided(soak: Soaking, session: str, turn_id: str) -> bool:
    return any(d.turn_id == turn_id for d in _read(soak, lambda v: v.decisions(session)))


def _settled(soak: Soaking, lane: Lane, tag: str, fault: Fault) -> bool:
    found = segment(soak, lane.session, tag)
    if found is None or _busy(lane.process.server, lane.session):
        return False
    if _read(soak, lambda v: v.open_injections(lane.session)):
        return False
    if fault.expect is Expect.HEALTHY:
        return found.ends_clean
    if fault.expect is Expect.RECOVER:
        return bool(found.injected) and found.ends_clean
    return _decided(soak, lane.session, found.opener.id)


def settle(soak: Soaking, lane: Lane, tag: str, fault: Fault) -> None:
    wait_until(lambda: _settled(soak, lane, tag, fault), SETTLE_S,
               f"turn {tag} ({fault.name}) in {lane.session} settles", every=0.25)


def _tagged_request(soak: Soaking, tag: str) -> bool:
    return any(tag_of(r.last_user_text) == tag for r in soak.provider.requests())


def _permission_asked(server: OpenCodeServer, session: str, after: int) -> dict[str, Any]:
    """The first permission ask of ``session`` among the events after index ``after``."""

    def asked() -> dict[str, Any] | None:
        return next((dict(e["properties"]) for e in server.events.all()[after:]
                     if e.get("type") == "permission.asked"
                     and e["properties"].get("sessionID") == session), None)

    return dict(wait_until(asked, STEP_S, f"a permission ask in {session}"))


def _left_alone_logged(soak: Soaking, session: str, after: int) -> bool:
    needle = f"stall check: session {session} busy"
    return any(needle in line and "left alone" in line for line in soak.daemon.lines()[after:])


def switch(soak: Soaking, lane: Lane, on: bool) -> None:
    """`/autoretry on|off here`, repeated until the daemon's store shows it (a command sent
    while the daemon is down is answered by the bridge alone and changes nothing)."""
    word = "on" if on else "off"

    def switched() -> bool:
        if _read(soak, lambda v: v.is_enabled(lane.session)) == on:
            return True
        lane.process.server.command(lane.session, "autoretry", f"{word} here")
        return bool(_read(soak, lambda v: v.is_enabled(lane.session)) == on)

    wait_until(switched, STEP_S, f"/autoretry {word} here for {lane.session}", every=0.5)


def _abort_when_sent(soak: Soaking, lane: Lane, tag: str) -> None:
    wait_until(lambda: _tagged_request(soak, tag), STEP_S, f"the provider gets {tag}")
    lane.process.server.abort(lane.session)


def _forgot(soak: Soaking, session: str, after: int) -> bool:
    """The daemon lost what it knew of the session's live state since line ``after``: its
    bridge's socket was cut or the daemon restarted. It then knows of no pending permission
    (nor that the session is busy) until OpenCode says more, so it cannot log a wait."""
    lost = (f"session {session} lost its owner", "autoretry daemon ")
    return any(needle in line for line in soak.daemon.lines()[after:] for needle in lost)


def _answer_permission(soak: Soaking, lane: Lane, events_before: int) -> None:
    server = lane.process.server
    mark = len(soak.daemon.lines())
    asked = _permission_asked(server, lane.session, events_before)
    # Proof that the daemon looked past stall_timeout and chose to wait: its own log line.
    wait_until(lambda: _left_alone_logged(soak, lane.session, mark)
               or _forgot(soak, lane.session, mark), STEP_S,
               f"the daemon leaves {lane.session} alone on its permission")
    if not _left_alone_logged(soak, lane.session, mark):
        soak.note("permission asks the daemon forgot (cut or restart), left alone")
    server.ok("POST", f"/permission/{asked['id']}/reply", {"reply": "once"})


def _write_in_backoff(soak: Soaking, lane: Lane, tag: str) -> None:
    """Once the retry is scheduled, the user writes: a new (healthy) turn of its own."""
    wait_until(lambda: any(i.state == "intent" for i in
                           _read(soak, lambda v: v.open_injections(lane.session))),
               STEP_S, f"a scheduled retry for {tag}", every=0.05)
    follow, healthy = f"{tag}f", BY_NAME["healthy"]
    soak.planned(follow, lane.session, healthy)
    lane.process.server.prompt_async(lane.session, prompt_text(follow, healthy))
    settle(soak, lane, follow, healthy)


def warm_up(soak: Soaking, process: Process) -> None:
    """One plain turn of ``process`` in a session of its own, switched off, before its lanes
    play: a fresh OpenCode's first turn can sit busy past the soak's stall_timeout (it loads
    the provider's SDK; found on 1.17.11 in CI, where every lane's first turn was taken for a
    stall). In a switched-off session the daemon only records it, and it is no soak session."""
    server = process.server
    warm = Lane(-1, server.create_session(title="soak warm-up")["id"], process)
    switch(soak, warm, on=False)
    server.prompt_async(warm.session, "Say hello")
    server.wait_idle(warm.session, SETTLE_S)


def play(soak: Soaking, lane: Lane, tag: str, fault: Fault) -> None:
    """One turn, from its prompt until it has settled."""
    if fault.how is How.OFF:
        switch(soak, lane, on=False)
    soak.planned(tag, lane.session, fault)
    lines_before = len(soak.daemon.lines())
    events_before = len(lane.process.server.events.all())
    lane.process.server.prompt_async(lane.session, prompt_text(tag, fault))
    if fault.how is How.ABORT:
        _abort_when_sent(soak, lane, tag)
    elif fault.how is How.PERMISSION:
        _answer_permission(soak, lane, events_before)
    elif fault.how is How.BACKOFF_MESSAGE:
        _write_in_backoff(soak, lane, tag)
    settle(soak, lane, tag, fault)
    if fault.if_stream_lost and _forgot(soak, lane.session, lines_before):
        soak.stream_lost(tag)
    if fault.how is How.OFF:
        switch(soak, lane, on=True)
