"""Issue 24 item 7, the fleet view: `[telemetry] otlp_endpoint` exports the counters and one span
per decision through OpenTelemetry, to a loopback OTLP/HTTP receiver the test owns."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from daemon_fakes import Harness
from otlp_receiver import Received, serve
from test_notify_daemon import blank_turn, continue_blank, recovered_blank

from opencode_autoretry.cli.main import main
from opencode_autoretry.config.settings import ConfigError
from opencode_autoretry.daemon.loop import Loop
from opencode_autoretry.daemon.telemetry import names as telemetry
from opencode_autoretry.daemon.telemetry.recorder import (
    TelemetryRecorder,
    decision_counts,
    start_telemetry,
)
from opencode_autoretry.opencode.db import OpenCodeDB
from opencode_autoretry.telemetry.config import TelemetryConfig, load_telemetry

# -- the [telemetry] table -----------------------------------------------------------------------


def test_off_by_default_and_an_endpoint_turns_it_on() -> None:
    assert not load_telemetry({}).enabled
    config = load_telemetry({"otlp_endpoint": "http://127.0.0.1:4318/", "export_interval": 5})
    assert config.enabled and config.export_interval == 5.0
    assert config.signal_url("metrics") == "http://127.0.0.1:4318/v1/metrics"
    assert config.signal_url("traces") == "http://127.0.0.1:4318/v1/traces"


@pytest.mark.parametrize("table, words", [
    ({"otlp_endpoint": "127.0.0.1:4318"}, "telemetry.otlp_endpoint must be an http:// or https"),
    ({"otlp_endpoint": 4318}, "telemetry.otlp_endpoint must be an http:// or https:// URL"),
    ({"otlp_endpoint": "http://collector:99999"}, "telemetry.otlp_endpoint must be a base URL"),
    ({"otlp_endpoint": "https://c.example/otlp?token=s3cret"}, "no query, got https://c.exa"),
    ({"export_interval": 0}, "telemetry.export_interval must be a number of seconds from 1"),
    ({"export_interval": True}, "telemetry.export_interval must be"),
    ({"endpoint": "http://127.0.0.1:4318"}, "telemetry: unknown key 'endpoint'"),
])
def test_a_bad_table_is_one_line_naming_the_key(table: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load_telemetry(table)
    assert words in str(caught.value)
    assert "s3cret" not in str(caught.value)


def test_config_check_refuses_a_bad_endpoint_with_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text('[telemetry]\notlp_endpoint = "udp://127.0.0.1:4317"\n')
    result = CliRunner().invoke(main, ["--config", str(config), "config", "check"],
                                env={"AUTORETRY_HOME": str(tmp_path)})
    assert result.exit_code == 2
    assert "telemetry.otlp_endpoint must be an http:// or https:// URL" in result.output


# -- the recorder, over a fake exporter ----------------------------------------------------------


@dataclass
class FakeExporter:
    counts: list[tuple[str, dict[str, str | int]]] = field(default_factory=list)
    decisions: list[tuple[datetime, dict[str, str | int]]] = field(default_factory=list)
    shut: list[float] = field(default_factory=list)

    def count(self, name: str, attributes: telemetry.Attributes) -> None:
        self.counts.append((name, dict(attributes)))

    def decision(self, at: datetime, attributes: telemetry.Attributes) -> None:
        self.decisions.append((at, dict(attributes)))

    def shutdown(self, timeout_s: float) -> None:
        self.shut.append(timeout_s)

    def named(self, name: str) -> list[dict[str, str | int]]:
        return [attributes for counted, attributes in self.counts if counted == name]


def with_telemetry(h: Harness, exporter: Any) -> TelemetryRecorder:
    """The harness's loop rebuilt with a recorder, as ``serve`` builds it."""
    recorder = start_telemetry(TelemetryConfig(otlp_endpoint="http://127.0.0.1:9"), h.store,
                               make_exporter=lambda _config: exporter)
    assert recorder is not None
    h.loop = Loop(h.config, h.store, h.bridge, lambda: OpenCodeDB.open(h.settings.opencode_db),
                  h.timers, h.clock, rand=lambda: 0.0, pid=999, telemetry=recorder)
    h.loop.recovery.rebuild(h.clock.now())
    h.hello()
    return recorder


def test_off_builds_no_recorder() -> None:
    assert start_telemetry(TelemetryConfig(), store=None) is None  # type: ignore[arg-type]


def test_a_recovered_turn_counts_its_fault_its_continuation_and_its_recovery_once(tmp_path):
    h = Harness(tmp_path)
    fake = FakeExporter()
    with_telemetry(h, fake)
    sid = recovered_blank(h)
    h.idle(sid)  # the same healthy turn judged again: still one recovery
    (decision,) = h.store.decisions(sid)
    assert fake.named(telemetry.FAULTS) == [{"kind": "blank"}]
    assert fake.named(telemetry.DECISIONS) == [{"action": "inject", "cause": decision.cause}]
    assert fake.named(telemetry.SENT) == [{}]
    assert fake.named(telemetry.RECOVERED) == [{}]
    assert fake.named(telemetry.GAVE_UP) == [] and fake.named(telemetry.LOOPS_STOPPED) == []
    ((at, span),) = fake.decisions
    assert at == decision.at
    assert span["autoretry.decision.id"] == decision.id
    assert span["autoretry.session_id"] == sid and span["autoretry.kind"] == "blank"
    assert span["autoretry.action"] == "inject" and span["autoretry.reason"] == decision.reason


def test_a_budget_run_out_counts_a_give_up(tmp_path):
    h = Harness(tmp_path)
    fake = FakeExporter()
    with_telemetry(h, fake)
    sid, _ = blank_turn(h)
    continue_blank(h, sid)
    continue_blank(h, sid)
    assert [d.action for d in h.store.decisions(sid)] == ["inject", "inject", "notify"]
    assert fake.named(telemetry.FAULTS) == [{"kind": "blank"}] * 3
    assert len(fake.named(telemetry.SENT)) == 2
    assert fake.named(telemetry.GAVE_UP) == [{"kind": "blank"}]
    assert fake.named(telemetry.RECOVERED) == []
    assert [span["autoretry.action"] for _, span in fake.decisions] == [
        "inject", "inject", "notify"]


def test_a_stopped_loop_is_counted_as_such_not_as_a_give_up() -> None:
    from opencode_autoretry.causes import Cause
    from opencode_autoretry.models import Action, Decision, Kind

    stop = Decision(Action.NOTIFY, Cause.GAVE_UP, "ses_a", "msg_1",
                    kind=Kind.REPETITION)
    names = [name for name, _ in decision_counts(stop)]
    assert telemetry.LOOPS_STOPPED in names and telemetry.GAVE_UP not in names


def test_a_failing_exporter_never_stops_the_recovery(tmp_path):
    class Broken(FakeExporter):
        def count(self, name: str, attributes: telemetry.Attributes) -> None:
            raise RuntimeError("collector exploded")

    h = Harness(tmp_path)
    with_telemetry(h, Broken())
    sid, _ = blank_turn(h)
    assert [d.action for d in h.store.decisions(sid)] == ["inject"]
    assert len(h.prompts()) == 1, "the continuation did not go out"


# -- OTLP/HTTP, to a loopback receiver -----------------------------------------------------------


@pytest.fixture
def receiver() -> Iterator[tuple[str, Received]]:
    yield from serve()


@pytest.fixture
def hanging_receiver() -> Iterator[tuple[str, Received]]:
    yield from serve(hold=True)


def otlp(endpoint: str, export_interval: float = 3600) -> Any:
    from opencode_autoretry.daemon.telemetry.otlp import OtlpExporter

    return OtlpExporter(TelemetryConfig(otlp_endpoint=endpoint, export_interval=export_interval))


def test_decisions_and_counters_reach_the_collector(tmp_path, receiver):
    endpoint, received = receiver
    h = Harness(tmp_path)
    recorder = with_telemetry(h, otlp(endpoint))
    sid, _ = blank_turn(h)
    continue_blank(h, sid)
    continue_blank(h, sid)
    decisions = h.store.decisions(sid)
    recorder.shutdown(timeout_s=60)  # as the daemon does on its way out: the last export

    received.wait_for("three decision spans", lambda: len(received.spans()) >= 3)
    spans = received.spans()
    assert [s.name for s in spans] == ["autoretry.decision"] * 3
    first = {a.key: a.value for a in spans[0].attributes}
    assert first["autoretry.decision.id"].int_value == decisions[0].id
    assert first["autoretry.session_id"].string_value == sid
    assert first["autoretry.kind"].string_value == "blank"
    assert spans[0].start_time_unix_nano == int(decisions[0].at.timestamp() * 1e9)
    resource = {a.key: a.value.string_value
                for a in received.traces[0].resource_spans[0].resource.attributes}
    assert resource["service.name"] == "opencode-autoretry"

    received.wait_for("the counters", lambda: bool(received.sums()))
    sums = received.sums()
    assert sums[("autoretry.faults", (("kind", "blank"),))] == 3
    assert sums[("autoretry.continuations.sent", ())] == 2
    assert sums[("autoretry.gave_up", (("kind", "blank"),))] == 1
    assert received.other == []


def test_a_hanging_collector_never_holds_the_loop_and_shutdown_is_bounded(
        tmp_path, hanging_receiver, caplog):
    endpoint, received = hanging_receiver
    h = Harness(tmp_path)
    recorder = with_telemetry(h, otlp(endpoint, export_interval=1))
    sid, _ = blank_turn(h)
    # The metric reader's own thread posts within a second; the collector holds that request
    # until the test ends. The loop's decisions and continuations go on meanwhile.
    received.in_flight.wait()
    continue_blank(h, sid)
    continue_blank(h, sid)
    assert [d.action for d in h.store.decisions(sid)] == ["inject", "inject", "notify"]
    assert len(h.prompts()) == 2
    with caplog.at_level(logging.WARNING):
        recorder.shutdown(timeout_s=0.5)  # the collector still holds: the bound ends it
    assert "did not finish within 0.5 s" in caplog.text
    assert not received.release.is_set()


# -- OpenTelemetry is imported only when configured ----------------------------------------------

PROBE = """
import json, sys
from opencode_autoretry.cli.main import main
from opencode_autoretry.config.load import load_config
from opencode_autoretry.daemon.commands import serve
from opencode_autoretry.daemon.loop import Loop
from opencode_autoretry.daemon.telemetry.recorder import start_telemetry

config = load_config(environ={"AUTORETRY_CONFIG": sys.argv[1]})
assert start_telemetry(config.telemetry, store=None) is None
try:
    main(["--help"])
except SystemExit:
    pass
print(json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def test_opentelemetry_is_not_imported_unless_configured(tmp_path):
    done = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path / "none.toml")],
                          capture_output=True, text=True, timeout=120, check=True)
    loaded = json.loads(done.stderr.strip().splitlines()[-1])
    assert "opencode_autoretry.daemon.telemetry.recorder" in loaded  # the probe did run
    assert [m for m in loaded if m.startswith(("opentelemetry", "google.protobuf"))] == []
