"""`autoretry trace`: every injection, decision and repetition stop with its outcome."""
