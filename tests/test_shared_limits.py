"""The limits the bridge (JS) and the daemon (Python) must agree on, pinned pair by pair.

Each pair used to be linked only by a comment ("= the bridge's TRIM_LIMIT"): changing one
side alone now fails here. The JS value is read from the source text (`export const NAME =
value`), so the test needs no node and reads exactly what is shipped. The protocol field
table (SCHEMA) is pinned by tests/test_protocol.py through node.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from opencode_autoretry.daemon.repetition import guard as daemon_guard
from opencode_autoretry.plugin_bridge import protocol
from opencode_autoretry.repetition import guard as core_guard

BRIDGE = Path(__file__).parent.parent / "plugin_bridge" / "autoretry"

_INT_PRODUCT = re.compile(r"\d+(?:\s*\*\s*\d+)*")
_STRING = r'"(?:[^"\\\n]|\\.)*"'


def js_value(source: str, name: str) -> int | str:
    """The value of `export const NAME = ...` in the bridge's `source` file."""
    return js_const((BRIDGE / source).read_text(), name, source)


def js_const(text: str, name: str, source: str = "<text>") -> int | str:
    """The value of `export const NAME = ...` in JS `text`: an integer literal, a product of
    integer literals (`1024 * 1024`) or a double-quoted string; a trailing comment is skipped."""
    found = re.search(rf"^export const {name} = ({_STRING}|[^/\n]+?)\s*(?://.*)?$", text, re.M)
    assert found, f"no `export const {name} = ...` in {source}"
    raw = found.group(1)
    if raw.startswith('"'):
        value = json.loads(raw)
        assert isinstance(value, str)
        return value
    assert _INT_PRODUCT.fullmatch(raw), f"{name} = {raw!r}: not a literal this test can read"
    product = 1
    for factor in raw.split("*"):
        product *= int(factor)
    return product


def js_string_set(source: str, name: str) -> frozenset[str]:
    """The strings of `export const NAME = new Set([...])` in the bridge's `source` file."""
    text = (BRIDGE / source).read_text()
    found = re.search(rf"^export const {name} = new Set\(\[(.*?)\]\)", text, re.M | re.S)
    assert found, f"no `export const {name} = new Set([...])` in plugin_bridge/autoretry/{source}"
    return frozenset(re.findall(r'"([^"]+)"', found.group(1)))


# (JS file, JS name, Python value, where the Python value lives)
PAIRS = [
    ("wire.js", "PROTOCOL_VERSION", protocol.PROTOCOL_VERSION, "protocol.PROTOCOL_VERSION"),
    ("wire.js", "MAX_LINE_BYTES", protocol.MAX_LINE_BYTES, "protocol.MAX_LINE_BYTES"),
    ("books.js", "SESSION_BOOK_LIMIT", protocol.HELLO_SESSIONS, "protocol.HELLO_SESSIONS"),
    ("books.js", "ASKS_LIMIT", protocol.HELLO_ASKS, "protocol.HELLO_ASKS"),
    ("books.js", "PROMPT_BOOK_LIMIT", protocol.HELLO_PROMPTS, "protocol.HELLO_PROMPTS"),
    ("history.js", "TRIM_LIMIT", daemon_guard.TRIM_RESEND_MAX, "daemon repetition TRIM_RESEND_MAX"),
    ("history.js", "TRIM_NOTICE", core_guard.TRIM_NOTICE, "core repetition TRIM_NOTICE"),
]


@pytest.mark.parametrize(("source", "name", "python", "where"), PAIRS, ids=[p[1] for p in PAIRS])
def test_bridge_constant_is_the_daemon_constant(
    source: str, name: str, python: int | str, where: str
) -> None:
    assert js_value(source, name) == python, f"{source} {name} differs from {where}"


def test_bridge_forwards_every_event_the_repetition_watch_reads() -> None:
    forwarded = js_string_set("wire.js", "FORWARDED_EVENTS")
    assert forwarded, "FORWARDED_EVENTS read as empty"
    assert forwarded >= daemon_guard.WATCHED_EVENTS, daemon_guard.WATCHED_EVENTS - forwarded


def test_js_reader_reads_products_strings_and_comments() -> None:
    """The reader itself: a wrong regex would compare nothing and pass."""
    text = (
        'export const A = 8 * 1024 // chars\n'
        'export const AB = 3\n'
        'export const S = "x // y" // = somewhere\n'
    )
    assert js_const(text, "A") == 8 * 1024
    assert js_const(text, "AB") == 3
    assert js_const(text, "S") == "x // y"
    with pytest.raises(AssertionError):
        js_const(text, "B")


def test_the_bridge_carries_the_package_version():
    """One version: pyproject's (read from the installed metadata) is the bridge's too, so the
    hello's ``bridge`` field and doctor's "bridge current" check speak of the same release."""
    from opencode_autoretry import package_version

    assert js_value("wire.js", "BRIDGE_VERSION") == package_version()
