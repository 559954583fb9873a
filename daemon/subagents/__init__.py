"""Hung subagents: the stall watch over child sessions."""
