"""What the daemon tells an OpenTelemetry collector (issue 24, "fleet view"), without OpenTelemetry.

``TelemetryRecorder`` listens where the notifications listen: to every recorded decision
(``Actions.listeners``), to every continuation that left (``Actions.sent_listeners``) and to
every turn that ended healthy (the loop's settled evaluation). It turns them into counter
increments and one record per decision, and hands them to an ``Exporter``: the OTLP one
(``otlp.OtlpExporter``, the only module importing OpenTelemetry) or a test's fake. The exporter
only queues: the SDK's batch processor and periodic reader send from their own threads, so the
loop thread never waits on the network.

The counters (each a monotonic sum, attribute keys in brackets):

- ``autoretry.faults`` [kind]: decisions about a failed or stalled turn, by what failed
- ``autoretry.decisions`` [action, cause]: every recorded decision
- ``autoretry.continuations.sent``: continuations written to a bridge
- ``autoretry.continuations.recovered``: turns that ended healthy after a confirmed continuation
  (once per turn and daemon run)
- ``autoretry.gave_up`` [kind]: budgets run out (a NOTIFY decision other than a stopped loop)
- ``autoretry.loops_stopped``: repetition loops stopped
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from opencode_autoretry.daemon.telemetry.names import (
    DECISIONS,
    FAULTS,
    GAVE_UP,
    LOOPS_STOPPED,
    RECOVERED,
    SENT,
    Attributes,
)
from opencode_autoretry.models import Action, Decision, Kind
from opencode_autoretry.notifications.config import redact_url

if TYPE_CHECKING:
    from opencode_autoretry.store.database import InjectionRecord
    from opencode_autoretry.telemetry.config import TelemetryConfig

log = logging.getLogger(__name__)

#: Seconds the daemon waits, on its way out, for the last export (a collector that is down
#: must not hold a stop or a restart).
SHUTDOWN_TIMEOUT_S = 5.0
#: Kinds that are no fault: a healthy end (todos left) and a turn still running.
NOT_FAULTS = frozenset({Kind.HEALTHY, Kind.RUNNING, Kind.UNFINISHED_TODOS})
#: Turns counted as recovered this run; older ones are forgotten past this many.
REMEMBERED_TURNS = 10_000


class Exporter(Protocol):
    """Where the recorder's counts and decisions go; every call returns at once."""

    def count(self, name: str, attributes: Attributes) -> None: ...
    def decision(self, at: datetime, attributes: Attributes) -> None: ...
    def shutdown(self, timeout_s: float) -> None: ...


class InjectionReader(Protocol):
    def injections(self, session_id: str | None = None,
                   since: datetime | None = None) -> list[InjectionRecord]: ...


def decision_attributes(decision: Decision, decision_id: int) -> dict[str, str | int]:
    """PURE: what a decision's span carries (``autoretry trace`` explains the same id)."""
    attributes: dict[str, str | int] = {
        "autoretry.decision.id": decision_id,
        "autoretry.action": str(decision.action),
        "autoretry.cause": str(decision.cause),
        "autoretry.session_id": decision.session_id,
        "autoretry.reason": decision.reason,
    }
    optional = {"autoretry.kind": decision.kind, "autoretry.turn_id": decision.turn_id,
                "autoretry.group": decision.group, "autoretry.model": decision.model}
    attributes.update({key: str(value) for key, value in optional.items() if value is not None})
    if decision.limit:
        attributes.update({"autoretry.budget.used": decision.used_after,
                           "autoretry.budget.limit": decision.limit})
    if decision.observed:  # observe mode (issue 23): recorded, never carried out
        attributes["autoretry.observed"] = 1
    return attributes


def decision_counts(decision: Decision) -> list[tuple[str, dict[str, str]]]:
    """PURE: the counter increments one decision makes."""
    counts: list[tuple[str, dict[str, str]]] = [
        (DECISIONS, {"action": str(decision.action), "cause": str(decision.cause)})]
    if decision.kind is not None and decision.kind not in NOT_FAULTS:
        counts.append((FAULTS, {"kind": str(decision.kind)}))
    if decision.action is Action.NOTIFY and not decision.observed:  # observe mode: not done
        if decision.kind is Kind.REPETITION:
            counts.append((LOOPS_STOPPED, {}))
        else:
            counts.append((GAVE_UP, {"kind": str(decision.kind or "unknown")}))
    return counts


class TelemetryRecorder:
    """The listeners the loop calls; each hands its counts to the exporter and returns."""

    def __init__(self, exporter: Exporter, store: InjectionReader) -> None:
        self._exporter = exporter
        self._store = store
        self._recovered: dict[tuple[str, str], None] = {}  # (session, turn), insertion-ordered

    def on_decision(self, decision: Decision, decision_id: int, now: datetime) -> None:
        for name, attributes in decision_counts(decision):
            self._exporter.count(name, attributes)
        self._exporter.decision(now, decision_attributes(decision, decision_id))

    def on_sent(self, injection: InjectionRecord, now: datetime) -> None:
        self._exporter.count(SENT, {})

    def on_healthy(self, session_id: str, turn_id: str, now: datetime) -> None:
        """A turn ended well: recovered when a continuation of autoretry's was confirmed in
        it (read from the store, as the ``recovered`` notification reads it)."""
        key = (session_id, turn_id)
        if key in self._recovered:
            return
        if not any(i.turn_id == turn_id and i.state == "confirmed"
                   for i in self._store.injections(session_id)):
            return
        self._recovered[key] = None
        if len(self._recovered) > REMEMBERED_TURNS:
            del self._recovered[next(iter(self._recovered))]
        self._exporter.count(RECOVERED, {})

    def shutdown(self, timeout_s: float = SHUTDOWN_TIMEOUT_S) -> None:
        self._exporter.shutdown(timeout_s)


def start_telemetry(config: TelemetryConfig, store: InjectionReader,
                    make_exporter: Callable[[TelemetryConfig], Exporter] | None = None,
                    ) -> TelemetryRecorder | None:
    """The recorder when ``[telemetry] otlp_endpoint`` is set, else None (and OpenTelemetry is
    not imported). Missing OpenTelemetry packages are logged, never fatal: the daemon's job is
    recovery, the export is extra."""
    if not config.enabled:
        return None
    if make_exporter is None:
        try:
            from opencode_autoretry.daemon.telemetry.otlp import OtlpExporter
        except ImportError as exc:
            log.error("telemetry is configured but OpenTelemetry is not installed (%s): "
                      "pip install 'opencode-autoretry[telemetry]'; nothing is exported", exc)
            return None
        make_exporter = OtlpExporter
    exporter = make_exporter(config)
    endpoint = redact_url(config.signal_url("metrics"))  # its path may hold a token
    log.info("telemetry: exporting to %s every %g s", endpoint, config.export_interval)
    return TelemetryRecorder(exporter, store)
