"""What a team's own tools see of the runs: OpenTelemetry traces (the SDK imported only when traces
are asked for) and `serve`'s Prometheus metrics.

May import: accounting/'s records, opencode/'s events, events, errors, credentials. Nothing that
runs anything."""
