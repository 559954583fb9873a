"""The summary of what autoretry did: its tallies and their rendering."""
