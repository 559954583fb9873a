"""`autoretry timeline`: one session step by step, as text and as a self-contained HTML page."""
