"""What feeds the loop's inbox: the bridges' Unix socket, OpenCode's DB tailer and watch, and the
daemon's privacy checks.
"""
