"""The command line: the composition root (main), shared options and the context every command
gets.
"""
