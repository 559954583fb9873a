"""PURE: unfinished todos and the reply-intent guard that keeps a continuation from talking over
the user.
"""
