"""Every session id a report prints can be pasted into ``autoretry timeline`` (issue 24):
``diagnose`` used to print ``ses=…MPAXuBY0EWxz``, a tail ``timeline`` did not accept."""

from __future__ import annotations

import json
import re

import pytest

#: A session id as printed: ``ses_…`` in full, or whatever follows ``ses=`` (a tail once).
SESSION_TOKEN = re.compile(r"(?<![\w…])ses=(\S+)|(?<![\w…])(ses_\w+)")


def _printed_session_refs(text: str) -> set[str]:
    return {m[1] or m[2] for m in SESSION_TOKEN.finditer(text)}


def _reports(invoke, seeded) -> dict[str, str]:
    found = {
        "diagnose": invoke("diagnose", "0").output,  # its summary included
        "errors": invoke("errors").output,
        "errors reset": invoke("errors", "reset").output,
        "trace": invoke("trace", "0").output,
    }
    for name, sid in seeded.sessions.items():
        found[f"timeline {name}"] = invoke("timeline", sid).output
    return found


def test_every_printed_session_id_opens_with_timeline(invoke, seeded) -> None:
    reports = _reports(invoke, seeded)
    refs = {name: _printed_session_refs(text) for name, text in reports.items()}
    # the good thing happened: each kind of report printed session ids to follow
    for name in ("diagnose", "errors", "errors reset", "trace", "timeline main"):
        assert refs[name], f"{name} printed no session id:\n{reports[name]}"
    known = set(seeded.sessions.values())
    for name, printed in refs.items():
        for ref in sorted(printed):
            result = invoke("timeline", ref, "--json")
            assert result.exit_code == 0, f"{name} printed {ref!r}: {result.output}"
            opened = json.loads(result.output)["session"]["id"]
            assert opened in known and opened.endswith(ref.lstrip("…")), (name, ref, opened)


@pytest.mark.parametrize("tail", ["…", ""])
def test_timeline_accepts_the_unique_tail_older_reports_printed(invoke, seeded, tail) -> None:
    sid = seeded.sessions["quiet"]
    result = invoke("timeline", tail + sid[-12:], "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["session"]["id"] == sid


def test_a_short_tail_is_not_a_match(invoke) -> None:
    assert invoke("timeline", "xY").exit_code == 1
