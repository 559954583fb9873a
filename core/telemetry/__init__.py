"""[telemetry]: the fleet view through OpenTelemetry (issue 24)."""
