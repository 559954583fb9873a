"""A loopback OTLP/HTTP receiver owned by a test: ``POST /v1/metrics`` and ``/v1/traces`` on
127.0.0.1, each body decoded with opentelemetry-proto and kept. ``hold`` makes every request
wait until the test releases it (a collector that hangs)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from loopback_http import LoopbackServer
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

#: A waiting bound only: the event arrives as soon as the exporter's thread posts it.
WAIT_S = 120.0


@dataclass
class Received:
    metrics: list[ExportMetricsServiceRequest] = field(default_factory=list)
    traces: list[ExportTraceServiceRequest] = field(default_factory=list)
    other: list[str] = field(default_factory=list)  # paths no OTLP exporter should post to
    arrived: threading.Condition = field(default_factory=threading.Condition)
    in_flight: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)

    def wait_for(self, what: str, condition: Callable[[], bool]) -> None:
        with self.arrived:
            if not self.arrived.wait_for(condition, WAIT_S):
                raise AssertionError(f"the receiver never got {what} (within {WAIT_S:g} s)")

    def spans(self) -> list[Any]:
        return [span for request in self.traces for resource in request.resource_spans
                for scope in resource.scope_spans for span in scope.spans]

    def sums(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], int]:
        """The newest value of every counter data point: (name, attributes) -> value."""
        values: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
        for request in self.metrics:
            for resource in request.resource_metrics:
                for scope in resource.scope_metrics:
                    for metric in scope.metrics:
                        for point in metric.sum.data_points:
                            key = tuple(sorted((a.key, attribute_value(a.value))
                                               for a in point.attributes))
                            values[(metric.name, key)] = point.as_int
        return values


def attribute_value(value: Any) -> str:
    kind = value.WhichOneof("value")
    return str(getattr(value, kind)) if kind else ""


def _handler(received: Received, hold: bool) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if hold:
                received.in_flight.set()
                received.release.wait()
            with received.arrived:
                if self.path == "/v1/metrics":
                    received.metrics.append(ExportMetricsServiceRequest.FromString(body))
                elif self.path == "/v1/traces":
                    received.traces.append(ExportTraceServiceRequest.FromString(body))
                else:
                    received.other.append(self.path)
                received.arrived.notify_all()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_args: object) -> None:  # quiet
            pass

    return Handler


def serve(hold: bool = False) -> Iterator[tuple[str, Received]]:
    """(the endpoint, what arrived) while the receiver runs; stopped afterwards."""
    received = Received()
    server = LoopbackServer(_handler(received, hold))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", received
    finally:
        received.release.set()
        server.shutdown()
        server.server_close()
