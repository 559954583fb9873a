"""The OTLP/HTTP exporter: the only module that imports OpenTelemetry (issue 24, "fleet view").

Imported by ``recorder.start_telemetry`` only when ``[telemetry] otlp_endpoint`` is set. It
keeps its own providers (the process-wide OpenTelemetry globals are left alone) and registers
no ``atexit`` hook: the daemon shuts it down itself, in ``serve``'s ``finally``, within a bound.

- counters: a ``PeriodicExportingMetricReader`` posts them to ``<endpoint>/v1/metrics`` every
  ``export_interval`` seconds from its own thread, and once more on shutdown;
- decisions: one span each (``autoretry.decision``, its start and end the decision's time),
  queued by a ``BatchSpanProcessor`` and posted to ``<endpoint>/v1/traces`` from its thread.
"""

from __future__ import annotations

import logging
import socket
import threading
from datetime import datetime

from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.metrics import Counter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from opencode_autoretry import package_version
from opencode_autoretry.daemon.telemetry.names import COUNTERS, DECISION_SPAN, Attributes
from opencode_autoretry.telemetry.config import TelemetryConfig

log = logging.getLogger(__name__)

SCOPE = "opencode_autoretry"
SERVICE_NAME = "opencode-autoretry"
#: Seconds one HTTP export may take (the SDK retries within it); a collector that hangs costs a
#: background thread this long, never the loop.
EXPORT_TIMEOUT_S = 10.0


def _nanoseconds(at: datetime) -> int:
    return int(at.timestamp() * 1_000_000_000)


class OtlpExporter:
    """Counters and decision spans, queued for the SDK's own threads to post."""

    def __init__(self, config: TelemetryConfig) -> None:
        resource = Resource.create({"service.name": SERVICE_NAME,
                                    "service.version": package_version(),
                                    "host.name": socket.gethostname()})
        reader = PeriodicExportingMetricReader(
            OTLPMetricExporter(endpoint=config.signal_url("metrics"), timeout=EXPORT_TIMEOUT_S),
            export_interval_millis=config.export_interval * 1000,
            export_timeout_millis=EXPORT_TIMEOUT_S * 1000,
        )
        self._meters = MeterProvider(metric_readers=[reader], resource=resource,
                                     shutdown_on_exit=False)
        self._tracers = TracerProvider(resource=resource, shutdown_on_exit=False)
        self._tracers.add_span_processor(BatchSpanProcessor(
            OTLPSpanExporter(endpoint=config.signal_url("traces"), timeout=EXPORT_TIMEOUT_S)))
        meter = self._meters.get_meter(SCOPE, package_version())
        self._counters: dict[str, Counter] = {
            name: meter.create_counter(name, unit="1", description=description)
            for name, description in COUNTERS.items()
        }
        self._tracer = self._tracers.get_tracer(SCOPE, package_version())

    def count(self, name: str, attributes: Attributes) -> None:
        self._counters[name].add(1, attributes=dict(attributes))

    def decision(self, at: datetime, attributes: Attributes) -> None:
        moment = _nanoseconds(at)
        span = self._tracer.start_span(DECISION_SPAN, start_time=moment,
                                       attributes=dict(attributes))
        span.end(end_time=moment)

    def shutdown(self, timeout_s: float) -> None:
        """The last spans and counters posted, waiting at most ``timeout_s``: the shutdown runs
        in a thread of its own, left behind (a daemon thread) if the collector is slow."""
        def flush() -> None:
            try:
                self._tracers.shutdown()  # the batch processor posts what it queued
                self._meters.shutdown(timeout_millis=timeout_s * 1000)  # one last export
            except Exception:  # the export is extra: never a traceback on the way out
                log.exception("telemetry: the last export failed")

        worker = threading.Thread(target=flush, name="telemetry-shutdown", daemon=True)
        worker.start()
        worker.join(timeout_s)
        if worker.is_alive():
            log.warning("telemetry: the last export did not finish within %g s; dropped",
                        timeout_s)
