from pathlib import Path

import pytest

from opencode_autoretry.config.settings import SettingsError, resolve


def write(tmp_path, text):
    path = tmp_path / "config.toml"
    path.write_text(text)
    return path


def test_defaults_without_file(tmp_path):
    s = resolve({}, environ={}, config_path=tmp_path / "missing.toml")
    assert s.enabled and s.poll_interval == 60.0 and s.stall_timeout == 180.0
    assert s.policy == {}


def test_precedence_flags_over_env_over_file(tmp_path):
    path = write(tmp_path, "poll_interval = 30\nstall_timeout = 100\nrunaway_steps = 4\n")
    env = {"AUTORETRY_STALL_TIMEOUT": "50", "AUTORETRY_RUNAWAY_STEPS": "5"}
    s = resolve({"runaway_steps": 9, "opencode_db": None}, environ=env, config_path=path)
    assert (s.poll_interval, s.stall_timeout, s.runaway_steps) == (30.0, 50.0, 9)


def test_policy_tables_are_kept_raw(tmp_path):
    path = write(tmp_path, "[budgets.blank]\nmax_retries = 1\n[messages]\nblank = 'Go on.'\n")
    s = resolve({}, environ={}, config_path=path)
    assert s.policy == {"budgets": {"blank": {"max_retries": 1}}, "messages": {"blank": "Go on."}}


def test_paths_expand_user(tmp_path):
    s = resolve({}, environ={"AUTORETRY_OPENCODE_DB": "~/x.db"}, config_path=tmp_path / "n")
    assert s.opencode_db == Path("~/x.db").expanduser()


@pytest.mark.parametrize(
    ("text", "env", "message"),
    [
        ("pol_interval = 3\n", {}, "unknown key 'pol_interval'"),
        ("stall_timeout = -1\n", {}, "stall_timeout must be greater than 0"),
        ("enabled = 'maybe'\n", {}, "enabled = 'maybe' is not a valid bool"),
        ("", {"AUTORETRY_POLL_INTERVAL": "soon"}, "AUTORETRY_POLL_INTERVAL: poll_interval"),
        ("poll_interval = [\n", {}, "not valid TOML"),
    ],
)
def test_bad_config_names_the_origin(tmp_path, text, env, message):
    path = write(tmp_path, text)
    with pytest.raises(SettingsError, match=message.replace("[", r"\[")):
        resolve({}, environ=env, config_path=path)
