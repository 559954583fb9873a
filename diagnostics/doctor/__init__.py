"""`autoretry doctor`: the set-up checks and their report."""
