"""Issue 20: no control sequence from OpenCode's DB or the store reaches the terminal.

Titles, model and provider ids, error messages, tool names and decision reasons carry OSC 52
(clipboard write), OSC 8 (a disguised link), OSC 0 (window title), CSI 2J (clear screen) and
the one-character CSI U+009B. Every text report must show them as visible escapes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from opencode_rows import BASE_MS, OpenCodeRows, api_error, assistant_data, tokens, tool_part
from seeded_reports import NOW

from opencode_autoretry.models import Action, Decision, Kind
from opencode_autoretry.store.database import Store

PAYLOAD = "\x1b]52;c;aGFjaw==\x07\x1b]8;;http://evil\x1b\\click\x1b]0;title\x07\x1b[2J\x9b2J"
EVIL = "EVIL" + PAYLOAD
SHOWN = r"EVIL\x1b]52;c;aGFjaw==\x07\x1b]8;;http://evil\x1b\click\x1b]0;title\x07\x1b[2J\x9b2J"
#: Any C0 control but newline and tab, DEL, any C1 (U+009B included).
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
OWN_SGR = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class Evil:
    db: Path
    store: Path
    session: str


@pytest.fixture()
def evil(tmp_path: Path) -> Iterator[Evil]:
    rows = OpenCodeRows(tmp_path / "opencode.db", start_ms=BASE_MS)
    sid = rows.session("evil-otter", title=EVIL)
    turn = rows.user(sid, "Say " + EVIL)
    rows.assistant(sid, turn, finish=None, error=api_error(EVIL, status=500), text="")
    turn = rows.user(sid, "again")
    ms = rows.tick()
    data = assistant_data(turn, ms, finish=None, toks=tokens(100, 0),
                          error=api_error(EVIL, status=500), completed_ms=ms + 500)
    data["modelID"], data["providerID"] = "model" + PAYLOAD, "prov" + PAYLOAD
    rows.message(sid, data, [tool_part("bash" + PAYLOAD, "error", "c1", ms, ms + 10)])
    rows.commit()
    store = Store.open(tmp_path / "autoretry.db")
    at = datetime.fromtimestamp(ms / 1000, tz=UTC)
    store.record_decision(Decision(Action.SKIP, "reason " + EVIL, sid, turn, Kind.SERVER_ERROR),
                          at)
    store.beat(NOW, 4242, {"bridges": [{"pid": 7, "directory": "/p" + PAYLOAD, "url": EVIL}],
                           "sessions": {sid: {"status": "busy" + PAYLOAD}},
                           "no_owner": ["ses" + PAYLOAD]})
    store.close()
    yield Evil(rows.path, tmp_path / "autoretry.db", sid)
    rows.close()


def assert_safe(result: Result, keep_colour: bool = False) -> None:
    assert result.exit_code == 0, result.output
    text = OWN_SGR.sub("", result.output) if keep_colour else result.output
    found = sorted({hex(ord(c)) for c in RAW_CONTROL.findall(text)})
    assert not found, f"raw controls reached stdout: {found}"


COMMANDS: list[Callable[[Evil], list[str]]] = [
    lambda e: ["timeline", e.session],
    lambda e: ["timeline", e.session, "--html", "-"],
    lambda e: ["errors"],
    lambda e: ["errors", "EVIL"],
    lambda e: ["diagnose", "30", "--no-index"],
    lambda e: ["trace", "evil-otter"],
    lambda e: ["status"],
]


@pytest.mark.parametrize("command", COMMANDS,
                         ids=["timeline", "html", "errors", "errors-kw", "diagnose", "trace",
                              "status"])
def test_no_raw_control_reaches_stdout(run_on, evil, command):
    result = run_on(evil.db, evil.store, *command(evil))
    assert_safe(result)
    assert r"\x1b]52;c;aGFjaw==\x07" in result.output  # the text is still shown, escaped


def test_the_timeline_shows_the_title_escaped_in_full(run_on, evil):
    result = run_on(evil.db, evil.store, "timeline", evil.session)
    assert SHOWN in result.output


@pytest.mark.parametrize("command", COMMANDS[:1] + COMMANDS[2:6],
                         ids=["timeline", "errors", "errors-kw", "diagnose", "trace"])
def test_with_colour_only_the_reports_own_colour_codes_remain(
    report_env, evil, command, monkeypatch
):
    from freezegun import freeze_time

    from opencode_autoretry.cli.main import main
    from opencode_autoretry.diagnostics.render import Style

    monkeypatch.setattr(Style, "for_stream", classmethod(lambda cls, stream=None: cls(True)))
    args = ["--db", str(evil.db), "--store", str(evil.store), *command(evil)]
    with freeze_time(NOW):  # color=True: click keeps escape sequences, as on a terminal
        result = CliRunner().invoke(main, args, color=True)
    assert "\x1b[" in result.output, "the report was not coloured: the test proves nothing"
    assert_safe(result, keep_colour=True)
    assert "\x1b[2J" not in result.output and r"\x1b]52;c;" in result.output
