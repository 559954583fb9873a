"""Shared pieces of the fuzz tests (issue 11 item 4): deterministic settings, JSON-ish values
with the nasty corners, and a tally of the inputs tried (printed at the end of each module
with ``pytest -s``, for the closing note)."""

from __future__ import annotations

import json
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

TRIED: Counter[str] = Counter()

#: Deterministic: the same inputs on every run and machine, no example database, no deadline.
FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def tried(target: str) -> None:
    TRIED[target] += 1


def report(module: str) -> None:
    listed = ", ".join(f"{name} {count}" for name, count in sorted(TRIED.items()))
    total = sum(count for name, count in TRIED.items() if ":" not in name)  # ":" = an outcome
    print(f"\n[fuzz] {module}: {listed} (inputs {total})", file=sys.stderr)
    TRIED.clear()  # one tally per module


#: Numbers JSON (or Python's json, or TOML) can produce, with the edges that broke parsers.
NUMBERS = st.one_of(
    st.integers(),
    st.sampled_from([0, -1, 2**31, 2**63, -(2**63), 10**20, 10**300]),
    st.floats(allow_nan=True, allow_infinity=True),
)
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, st.text(max_size=30),
                    st.sampled_from(["", "\ud800", "a\udfffb", "nan", "inf", "1e400", "-5"]))


def json_values(max_leaves: int = 6) -> st.SearchStrategy[Any]:
    return st.recursive(
        SCALARS,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.dictionaries(st.text(max_size=10), inner, max_size=5),
        ),
        max_leaves=max_leaves,
    )


def shaped(keys: list[str], values: st.SearchStrategy[Any] | None = None) -> st.SearchStrategy[
        dict[str, Any]]:
    """Dicts over the expected ``keys`` (any subset, any values) plus stray keys."""
    value = values if values is not None else json_values(3)
    return st.builds(
        lambda known, stray: {**stray, **known},
        st.dictionaries(st.sampled_from(keys), value, max_size=len(keys)),
        st.dictionaries(st.text(max_size=8), value, max_size=2),
    )


def dumps(value: Any) -> str:
    """JSON text as a JS or Python writer would make it (NaN/Infinity kept: Python emits
    them, and a reader must survive them)."""
    return json.dumps(value, allow_nan=True)


def never_raises(call: Callable[[], Any], allowed: tuple[type[BaseException], ...] = ()) -> Any:
    try:
        return call()
    except allowed:
        return None
