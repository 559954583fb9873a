"""PURE: how a turn is judged and what is decided: classifier, error kinds, retry hints, budgets,
policy, fallback, subagent stalls.
"""
