"""Fuzzing the configuration: config.toml (random bytes, and generated TOML over the real keys
with wrong types and edge values), the ``AUTORETRY_*`` variables, the policy tables and the
penalty tables. Only ``SettingsError`` / ``PolicyError`` may come out, each naming a key."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fuzzing import FUZZ, report, tried
from hypothesis import given, settings
from hypothesis import strategies as st

from opencode_autoretry.config.settings import Settings, SettingsError, resolve
from opencode_autoretry.decisions.policy import MESSAGE_KEYS, PolicyError, load_policy
from opencode_autoretry.models import BudgetGroup
from opencode_autoretry.repetition.penalties import PENALTY_RANGES, load_penalties

SETTINGS_KEYS = ["opencode_db", "store", "socket", "log_dir", "enabled", "poll_interval",
                 "tick_interval", "stall_timeout", "runaway_steps", "verbose", "nonsense"]
BUDGET_KEYS = ["max_retries", "initial_delay", "max_delay", "jitter_ratio", "deadline", "x"]
GROUPS = [g.value for g in BudgetGroup] + ["interruption", "bogus"]
TOML_SCALARS = st.one_of(
    st.booleans(), st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from([0, -1, 1, 2, 100, 101, 10**6, 0.5, 1.5, -0.0]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["~", "~nosuchuser/x", "a\x00b", "", "{reason}", "{used}{group}{kind}"]),
)


def toml_value(value: Any) -> str:
    """A TOML literal for a scalar, array or inline table."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)  # JSON escapes are TOML basic-string escapes
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + "}"


def toml(table: dict[str, Any]) -> str:
    return "\n".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in table.items()) + "\n"


VALUES = st.recursive(TOML_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=5)
BUDGET = st.one_of(st.dictionaries(st.sampled_from(BUDGET_KEYS), TOML_SCALARS, max_size=4),
                   TOML_SCALARS)
BUDGETS = st.dictionaries(st.sampled_from(GROUPS), BUDGET, max_size=3)
CONFIG = st.fixed_dictionaries({}, optional={
    **{key: VALUES for key in SETTINGS_KEYS},
    "budgets": st.one_of(BUDGETS, TOML_SCALARS),
    "providers": st.dictionaries(st.text(max_size=6), st.one_of(
        st.fixed_dictionaries({"budgets": BUDGETS}), VALUES), max_size=2),
    "messages": st.dictionaries(st.sampled_from([*MESSAGE_KEYS, "zz"]), TOML_SCALARS,
                                max_size=3),
    "repetition": st.one_of(st.fixed_dictionaries({"penalties": st.dictionaries(
        st.text(max_size=5), st.dictionaries(st.sampled_from([*PENALTY_RANGES, "top_k"]),
                                             TOML_SCALARS, max_size=2), max_size=2)}), VALUES),
})


@pytest.fixture(scope="module", autouse=True)
def _tally() -> Iterator[None]:
    yield
    report("config")


def load_everything(path: Path, environ: dict[str, str] | None = None) -> Settings | None:
    """What the daemon does at start-up; the only allowed failures name what is wrong."""
    try:
        resolved = resolve(environ=environ or {}, config_path=path)
        load_policy(resolved.policy)
        load_penalties(resolved.repetition)
    except (SettingsError, PolicyError) as exc:
        assert str(exc) and len(str(exc)) < 400
        tried("outcome:not TOML" if "not valid TOML" in str(exc) else "outcome:refused")
        return None
    tried("outcome:accepted")
    for name in ("poll_interval", "tick_interval", "stall_timeout"):
        value = getattr(resolved, name)
        assert math.isfinite(value) and value > 0, (name, value)
    for name in ("opencode_db", "store", "socket", "log_dir"):
        assert "\x00" not in str(getattr(resolved, name))
    return resolved


@settings(FUZZ, max_examples=150)
@given(st.binary(max_size=200))
def test_random_bytes_as_config_file(tmp_path_factory, data: bytes) -> None:
    tried("config.bytes")
    path = tmp_path_factory.mktemp("cfg") / "config.toml"
    path.write_bytes(data)
    load_everything(path)


@settings(FUZZ, max_examples=150)
@given(CONFIG)
def test_generated_toml_over_the_real_keys(tmp_path_factory, table: dict[str, Any]) -> None:
    tried("config.toml")
    path = tmp_path_factory.mktemp("cfg") / "config.toml"
    path.write_text(toml(table), encoding="utf-8", errors="surrogatepass")
    load_everything(path)


ENV_TEXT = st.one_of(st.text(max_size=12).filter(lambda t: "\x00" not in t),
                     st.sampled_from(["nan", "inf", "-1", "0", "1e400", "9" * 5000, "~nobody/x",
                                      "true", "yes", " 5 ", "0x10"]))


@settings(FUZZ, max_examples=150)
@given(st.dictionaries(st.sampled_from([f"AUTORETRY_{k.upper()}" for k in SETTINGS_KEYS]),
                       ENV_TEXT, max_size=4))
def test_environment_variables(tmp_path_factory, environ: dict[str, str]) -> None:
    tried("config.env")
    load_everything(tmp_path_factory.mktemp("cfg") / "absent.toml", environ)


# -- regressions found by fuzzing ------------------------------------------------------------


@pytest.mark.parametrize("text", ["poll_interval = nan", "tick_interval = inf",
                                  "stall_timeout = -inf"])
def test_regression_non_finite_intervals_are_refused(tmp_path: Path, text: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text + "\n")
    with pytest.raises(SettingsError, match="finite"):
        resolve(environ={}, config_path=path)


@pytest.mark.parametrize("text", ['store = "~nosuchuser-zz/x"', 'opencode_db = "a\\u0000b"',
                                  "socket = {a = 1}", "log_dir = 5", 'store = ""'])
def test_regression_bad_paths_are_a_settings_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(text + "\n")
    with pytest.raises(SettingsError, match="is not a valid"):
        resolve(environ={}, config_path=path)


def test_regression_a_huge_value_is_quoted_short() -> None:
    with pytest.raises(SettingsError) as info:
        resolve(environ={"AUTORETRY_RUNAWAY_STEPS": "9" * 5000}, config_path=Path("/nonexistent"))
    assert len(str(info.value)) < 200


@pytest.mark.parametrize("data", [b"\x80", b'poll_interval = 5 # \xff\n', b"a = " + b"[" * 5000])
def test_regression_a_non_utf8_or_absurd_file_is_refused(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "config.toml"
    path.write_bytes(data)
    with pytest.raises(SettingsError, match="not UTF-8|not valid TOML"):
        resolve(environ={}, config_path=path)
