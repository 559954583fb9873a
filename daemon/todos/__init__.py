"""Unfinished todos: the guard that continues a root turn that stopped with todos left."""
