"""Loops: the live watch over streamed deltas and the guard that stops a looping turn."""
