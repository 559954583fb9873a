"""Exports counters and decisions to an OTLP/HTTP collector (issue 24); OpenTelemetry is
imported by ``otlp`` only, and only when ``[telemetry] otlp_endpoint`` is set."""
