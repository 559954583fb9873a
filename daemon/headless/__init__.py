"""Headless runs: `autoretry exec -- opencode run ...`."""
