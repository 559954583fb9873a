"""Notifications, the daemon's half: the channels' workers, what the loop hands them, and
`autoretry notify`.
"""
