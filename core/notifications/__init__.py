"""Notifications, the pure half: which decisions tell the user, their configuration and their rows
in the store.
"""
