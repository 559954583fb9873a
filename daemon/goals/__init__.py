"""Goals in the daemon (issue 22): the check runner and the guard that acts on its results."""
