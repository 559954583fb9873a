"""Goals (issue 22): keep a session going until a shell check passes, within a budget."""
