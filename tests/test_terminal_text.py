"""core/terminal_text.py: the one sanitiser of untrusted text in text reports (issue 20)."""

from __future__ import annotations

import json

import click

from opencode_autoretry.terminal_text import json_visible, visible, visible_keeping_colour

ATTACKS = ["\x1b]52;c;aGk=\x07", "\x1b]8;;http://evil\x1b\\", "\x1b]0;t\x07", "\x1b[2J",
           "\x9b2J", "\r", "\x7f", "\u202e"]


def test_every_control_but_newline_and_tab_becomes_a_visible_escape():
    for attack in ATTACKS:
        shown = visible("a" + attack + "b\n\tc")
        assert shown.startswith("a\\") and shown.endswith("b\n\tc"), repr(shown)
        assert not any(ord(ch) < 0x20 and ch not in "\n\t" for ch in shown)
        assert not any(0x7F <= ord(ch) <= 0x9F for ch in shown)
    assert visible("\x1b[2J\x9b") == r"\x1b[2J\x9b"


def test_a_coloured_report_keeps_only_its_own_colour_codes():
    own = click.style("ok", fg="green", bold=True) + click.style("x", fg="bright_black")
    assert visible_keeping_colour(own) == own
    assert visible_keeping_colour(own + "\x1b[2J\x1b]0;t\x07") == own + r"\x1b[2J\x1b]0;t\x07"
    assert visible_keeping_colour("\x1b[8m") == r"\x1b[8m"  # conceal is not one of ours


def test_json_keeps_its_value_and_loses_raw_c1():
    text = json.dumps({"t": "a\x9b2J\u202e\x7f"}, ensure_ascii=False)
    safe = json_visible(text)
    assert json.loads(safe) == json.loads(text)
    assert not any(0x7F <= ord(ch) <= 0x9F for ch in safe)
