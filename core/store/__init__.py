"""The daemon's own SQLite store: budgets, decisions, injections, the switch, the heartbeat."""
