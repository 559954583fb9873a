"""Writes rows shaped exactly like OpenCode 1.18.33's (reference §2.3-2.6) into a fresh DB.

Shared by the reader/report tests and ``bench/reports.py``. The schema is the pinned DDL in
``tests/fixtures/opencode-1.18.33.sql``; ids follow OpenCode's formats (``msg_``/``prt_``
ascending with time, ``ses_`` descending). The JSON is compact, as OpenCode's
``JSON.stringify`` writes it.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

SCHEMA = Path(__file__).parent / "fixtures" / "opencode-1.18.33.sql"
PROJECT_ID = "0ac52799a169132767a5b79640805b1c21217fb7"
SNAPSHOT = "fe8a5305ed92502cc3c96432049de9cdc12a068e"
BASE_MS = 1796040581773  # a real timestamp from the reference runs
_B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_MASK48 = (1 << 48) - 1


def _suffix(counter: int) -> str:
    """14 base62 characters that look random but are a pure function of ``counter``."""
    value = int.from_bytes(hashlib.blake2b(counter.to_bytes(8, "big"), digest_size=11).digest())
    chars = []
    for _ in range(14):
        value, digit = divmod(value, 62)
        chars.append(_B62[digit])
    return "".join(chars)


def ascending_id(prefix: str, ms: int, counter: int) -> str:
    """``msg_``/``prt_``/``evt_`` ids: 12 hex digits of (ms * 4096 + counter), then base62."""
    return f"{prefix}_{(ms * 0x1000 + counter % 0x1000) & _MASK48:012x}{_suffix(counter)}"


def descending_id(prefix: str, ms: int, counter: int) -> str:
    """``ses_`` ids: the same bits inverted, so newer sessions sort first."""
    return f"{prefix}_{~(ms * 0x1000 + counter % 0x1000) & _MASK48:012x}{_suffix(counter)}"


def tokens(input: int = 100, output: int = 10, reasoning: int = 0, cache_read: int = 0) -> dict:
    total = input + output + reasoning + cache_read
    return {
        "total": total,
        "input": input,
        "output": output,
        "reasoning": reasoning,
        "cache": {"write": 0, "read": cache_read},
    }


def user_data(ms: int) -> dict:
    return {
        "role": "user",
        "time": {"created": ms},
        "agent": "build",
        "model": {"providerID": "fake", "modelID": "fake-model"},
        "summary": {"diffs": []},
    }


def assistant_data(
    parent_id: str,
    ms: int,
    *,
    finish: str | None = "stop",
    toks: Mapping[str, Any] | None = None,
    error: Mapping[str, Any] | None = None,
    completed_ms: int | None = None,
) -> dict:
    data: dict[str, Any] = {
        "parentID": parent_id,
        "role": "assistant",
        "mode": "build",
        "agent": "build",
        "path": {"cwd": "/work/project", "root": "/work/project"},
        "cost": 0,
        "tokens": dict(toks) if toks is not None else tokens(0, 0),
        "modelID": "fake-model",
        "providerID": "fake",
        "time": {"created": ms},
    }
    if completed_ms is not None:
        data["time"]["completed"] = completed_ms
    if finish is not None:
        data["finish"] = finish
    if error is not None:
        data["error"] = dict(error)
    return data


def api_error(
    message: str,
    *,
    status: int | None = None,
    retryable: bool = True,
    code: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> dict:
    data: dict[str, Any] = {"message": message, "isRetryable": retryable}
    if status is not None:
        data["statusCode"] = status
    if headers is not None:
        data["responseHeaders"] = dict(headers)
        data["responseBody"] = json.dumps({"error": {"message": message}})
    data["metadata"] = (
        {"code": code} if code else {"url": "http://127.0.0.1:18555/v1/chat/completions"}
    )
    return {"name": "APIError", "data": data}


def aborted_error() -> dict:
    return {"name": "MessageAbortedError", "data": {"message": "Aborted"}}


def text_part(text: str, start: int, end: int | None = None) -> dict:
    time = {"start": start} if end is None else {"start": start, "end": end}
    return {"type": "text", "text": text, "time": time}


def reasoning_part(text: str, start: int, end: int) -> dict:
    return {"type": "reasoning", "text": text, "time": {"start": start, "end": end}}


def tool_part(tool: str, status: str, call: str, start: int, end: int) -> dict:
    state: dict[str, Any] = {"status": status, "input": {"command": "echo hi-from-tool"}}
    if status == "completed":
        state.update(
            output="hi-from-tool\n",
            metadata={"output": "hi-from-tool\n", "exit": 0, "truncated": False},
            title="echo hi-from-tool",
            time={"start": start, "end": end},
        )
    elif status == "error":
        state.update(error="Tool execution aborted", time={"start": start, "end": end})
    else:
        state["time"] = {"start": start}
    return {"type": "tool", "tool": tool, "callID": f"call_fake_{call}", "state": state}


def step_start() -> dict:
    return {"snapshot": SNAPSHOT, "type": "step-start"}


def step_finish(reason: str, toks: Mapping[str, Any]) -> dict:
    return {
        "reason": reason,
        "snapshot": SNAPSHOT,
        "type": "step-finish",
        "tokens": dict(toks),
        "cost": 0,
    }


def marker_text(text: str, decision: int, kind: str, injection: int) -> dict:
    marker = {"decision": str(decision), "kind": kind, "injection": str(injection)}
    return {"type": "text", "text": text, "metadata": {"autoretry": marker}}


def dumps(value: Mapping[str, Any]) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


class OpenCodeRows:
    """A DB with the pinned schema, in WAL mode, kept open like a running OpenCode would."""

    def __init__(self, path: Path, start_ms: int = BASE_MS) -> None:
        self.path = path
        self.conn = sqlite3.connect(path)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.executescript(SCHEMA.read_text())
        self.conn.execute(
            "INSERT INTO project (id, worktree, vcs, time_created, time_updated, sandboxes) "
            "VALUES (?, '/work/project', 'git', ?, ?, '[]')",
            (PROJECT_ID, start_ms, start_ms),
        )
        self.clock = start_ms
        self.counter = 0

    def tick(self, ms: int = 1000) -> int:
        self.clock += ms
        return self.clock

    def _next(self) -> int:
        self.counter += 1
        return self.counter

    def session(
        self,
        slug: str,
        *,
        parent_id: str | None = None,
        title: str = "scenario task",
        version: str = "1.18.33",
        at: int | None = None,
    ) -> str:
        ms = self.clock if at is None else at
        sid = descending_id("ses", ms, self._next())
        self.conn.execute(
            "INSERT INTO session (id, project_id, parent_id, slug, directory, path, title, "
            "version, agent, model, time_created, time_updated) "
            "VALUES (?, ?, ?, ?, '/work/project', '', ?, ?, 'build', ?, ?, ?)",
            (
                sid,
                PROJECT_ID,
                parent_id,
                slug,
                title,
                version,
                dumps({"id": "fake-model", "providerID": "fake", "variant": "default"}),
                ms,
                ms,
            ),
        )
        return sid

    def message(
        self, session_id: str, data: Mapping[str, Any], parts: Sequence[Mapping[str, Any]]
    ) -> str:
        ms = int(data["time"]["created"])
        mid = ascending_id("msg", ms, self._next())
        updated = int(data["time"].get("completed", ms))
        self.conn.execute(
            "INSERT INTO message VALUES (?, ?, ?, ?, ?)",
            (mid, session_id, ms, updated, dumps(data)),
        )
        for offset, part in enumerate(parts):
            pid = ascending_id("prt", ms + offset, self._next())
            self.conn.execute(
                "INSERT INTO part VALUES (?, ?, ?, ?, ?, ?)",
                (pid, mid, session_id, ms + offset, ms + offset, dumps(part)),
            )
        return mid

    def user(self, session_id: str, text: str = "Say hello", *, at: int | None = None) -> str:
        ms = self.tick() if at is None else at
        return self.message(session_id, user_data(ms), [{"type": "text", "text": text}])

    def injected(
        self,
        session_id: str,
        *,
        decision: int,
        kind: str,
        injection: int,
        text: str = "Continue.",
        at: int | None = None,
    ) -> str:
        ms = self.tick() if at is None else at
        return self.message(
            session_id, user_data(ms), [marker_text(text, decision, kind, injection)]
        )

    def compaction_continue(self, session_id: str, *, at: int | None = None) -> str:
        ms = self.tick() if at is None else at
        part = {
            "type": "text",
            "metadata": {"compaction_continue": True},
            "synthetic": True,
            "text": "The previous request exceeded the provider's size limit. Continue.",
            "time": {"start": ms, "end": ms},
        }
        return self.message(session_id, user_data(ms), [part])

    def assistant(
        self,
        session_id: str,
        parent_id: str,
        *,
        finish: str | None = "stop",
        toks: Mapping[str, Any] | None = None,
        text: str | None = "Hello from the fake model. This is a normal answer. ",
        reasoning: str | None = None,
        tools: Sequence[tuple[str, str]] = (),
        error: Mapping[str, Any] | None = None,
        completed: bool = True,
        at: int | None = None,
    ) -> str:
        """One LLM step: step-start, [reasoning], [text], tools, [step-finish when finished]."""
        ms = self.tick() if at is None else at
        toks = toks if toks is not None else (tokens() if finish else tokens(0, 0))
        done = ms + 500 if completed else None
        parts: list[dict] = [step_start()]
        if reasoning is not None:
            parts.append(reasoning_part(reasoning, ms + 10, ms + 100))
        if text is not None:
            parts.append(text_part(text, ms + 100, ms + 400 if completed else None))
        for index, (tool, status) in enumerate(tools):
            parts.append(tool_part(tool, status, f"{ms}{index}", ms + 200, ms + 300))
        if finish is not None:
            parts.append(step_finish(finish, toks))
        data = assistant_data(
            parent_id, ms, finish=finish, toks=toks, error=error, completed_ms=done
        )
        return self.message(session_id, data, parts)

    def event(self, session_id: str, type: str, data: Mapping[str, Any]) -> None:
        seq = self.conn.execute(
            "SELECT coalesce(max(seq), 0) + 1 FROM event WHERE aggregate_id = ?", (session_id,)
        ).fetchone()[0]
        self.conn.execute(
            "INSERT INTO event_sequence VALUES (?, ?, NULL) ON CONFLICT (aggregate_id) "
            "DO UPDATE SET seq = excluded.seq",
            (session_id, seq),
        )
        self.conn.execute(
            "INSERT INTO event VALUES (?, ?, ?, ?, ?)",
            (ascending_id("evt", self.clock, self._next()), session_id, seq, type, dumps(data)),
        )

    def commit(self) -> None:
        self.conn.commit()

    def close(self) -> None:
        self.conn.close()
