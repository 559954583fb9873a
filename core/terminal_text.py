"""PURE: untrusted text made safe for a terminal, the one sanitiser of every text report.

Session titles, model and provider ids, error messages, tool names and excerpts come from
OpenCode's DB, i.e. from models, providers and whoever wrote the prompt. Printed raw, an
``ESC ] 52`` wrote the clipboard, ``ESC ] 8`` disguised a link, ``ESC ] 0`` set the window
title and ``ESC [ 2J`` cleared the screen (issue 20). Every C0 and C1 control other than
newline and tab (DEL and U+009B, the one-character CSI, included), and the invisible bidi and
line-separator characters, are shown as ``\\x1b`` / ``\\u202e`` escapes: still readable, never
acted on.
"""

from __future__ import annotations

import re

# Lone surrogates too: a path or argument of bytes that are not UTF-8 cannot be printed.
_UNSAFE = "\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_CONTROL = re.compile(f"[{_UNSAFE}]")
#: The only escape sequences the reports write themselves: click.style's SGR codes (reset,
#: bold, dim, normal, the 8 foreground colours and their bright forms, default colour) and
#: rich's combinations of them (``ESC [ 1;36 m``).
_SGR_CODE = r"(?:0|1|2|22|3[0-9]|9[0-7])"
_OWN_SGR = rf"\x1b\[{_SGR_CODE}(?:;{_SGR_CODE})*m"
_CONTROL_OR_OWN_SGR = re.compile(f"({_OWN_SGR})|[{_UNSAFE}]")


def _escape(char: str) -> str:
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def visible(text: str) -> str:
    """``text`` with every terminal control made a visible escape (newline and tab kept)."""
    return _CONTROL.sub(lambda m: _escape(m[0]), text)


def visible_keeping_colour(text: str) -> str:
    """A whole coloured report: its own SGR colour codes kept, every other control escaped.

    The last line of defence for what a renderer forgot to pass through ``visible``: at worst
    such text can switch among the report's own colours, never move, clear, title, link or
    write the clipboard."""
    return _CONTROL_OR_OWN_SGR.sub(lambda m: m[1] or _escape(m[0]), text)


_JSON_UNSAFE = re.compile("[\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def json_visible(text: str) -> str:
    """JSON written with ``ensure_ascii=False``: the controls ``json.dumps`` leaves raw (DEL,
    the C1 range with U+009B, bidi) as ``\\u`` escapes, so the JSON is the same value."""
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m[0]):04x}", text)
