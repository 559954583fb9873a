"""The report index: classified steps and per-session digests, kept in step with OpenCode's DB."""
