"""``[notify]`` validation (key paths in every error) and secret redaction."""

from __future__ import annotations

import pytest

from opencode_autoretry.config.settings import resolve
from opencode_autoretry.notifications.config import (
    DEFAULT_EVENTS,
    NotifyConfig,
    NotifyConfigError,
    load_notify,
    redact_url,
    scrub,
)


def test_defaults_send_nothing_and_leave_recovered_out():
    config = load_notify({})
    assert config == NotifyConfig() and config.channels == ()
    assert "recovered" not in DEFAULT_EVENTS and "gave_up" in DEFAULT_EVENTS


def test_a_full_table():
    config = load_notify({"desktop": True, "command": ["notify-me", "--json"],
                          "webhook": "https://ntfy.sh/t0ken", "webhook_format": "ntfy",
                          "events": ["gave_up", "recovered"], "max_per_hour": 5, "timeout": 3})
    assert config.channels == ("desktop", "command", "webhook")
    assert config.events == {"gave_up", "recovered"} and config.timeout == 3.0
    assert config.wants("recovered") and not config.wants("terminal")


@pytest.mark.parametrize("table, message", [
    ({"webhok": "x"}, "notify: unknown key 'webhok'"),
    ({"desktop": "yes"}, "notify.desktop must be true or false"),
    ({"command": []}, "notify.command must be a non-empty list"),
    ({"command": ["ok", 3]}, "notify.command[1] must be a string"),
    ({"webhook": "ftp://h/x"}, "notify.webhook must be an http:// or https:// URL"),
    ({"webhook_format": "teams"}, "notify.webhook_format: unknown value 'teams'"),
    ({"events": ["gave_up", "gaveup"]}, "notify.events[1]: unknown value 'gaveup'"),
    ({"events": "gave_up"}, "notify.events must be a list"),
    ({"max_per_hour": 0}, "notify.max_per_hour must be between 1 and 10000"),
    ({"timeout": 120}, "notify.timeout must be between 0.1 and 60 s"),
])
def test_bad_values_name_the_key(table, message):
    with pytest.raises(NotifyConfigError, match=message.replace("[", r"\[").replace("(", r"\(")):
        load_notify(table)


def test_a_bad_url_error_hides_the_secret():
    with pytest.raises(NotifyConfigError) as info:
        load_notify({"webhook": "ftp://host/s3cret?token=abc"})
    assert "s3cret" not in str(info.value) and "abc" not in str(info.value)


def test_redaction_keeps_scheme_and_host_only():
    assert redact_url("https://hooks.slack.com/services/T0/B0/XYZ?x=1") == \
        "https://hooks.slack.com/…"
    config = load_notify({"webhook": "http://127.0.0.1:9/hook/abc?token=t0psecret"})
    text = "POST http://127.0.0.1:9/hook/abc?token=t0psecret failed; Bearer xyz"
    cleaned = scrub(text, config.secrets())
    assert "t0psecret" not in cleaned and "/hook/abc" not in cleaned and "xyz" not in cleaned


def test_settings_keep_the_raw_tables(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text('[notify]\nwebhook = "http://127.0.0.1:1/x"\n[fallback]\n'
                    '"fake/a" = ["fake/b"]\n')
    settings = resolve({}, environ={}, config_path=path)
    assert settings.notify == {"webhook": "http://127.0.0.1:1/x"}
    assert settings.fallback == {"fake/a": ["fake/b"]}
