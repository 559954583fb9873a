"""Security (issue 11 item 5): only the daemon's user may connect, state is private, logs carry
no conversation or credential, and OpenCode's DB is left byte-identical by the daemon."""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import queue
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from daemon_fakes import Harness, disconnect, drain

from opencode_autoretry.daemon.commands import setup_logging
from opencode_autoretry.daemon.intake import hardening
from opencode_autoretry.daemon.intake.bridges import BridgeServer
from opencode_autoretry.plugin_bridge import protocol
from opencode_autoretry.store.database import Store

SECRET = "sk-live-7f3a9c1e5b2d4f6a8c0e"  # an API key shape: must never reach a log
CONVERSATION = "the user's private paragraph " * 40


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture()
def umask_restored() -> Iterator[None]:
    old = os.umask(0o022)
    yield
    os.umask(old)


# -- peer credentials ------------------------------------------------------------------------


def test_same_user_accepts_only_the_own_uid_and_fails_closed() -> None:
    fake = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        assert hardening.same_user(fake, uid=1000, read_uid=lambda s: 1000) is None
        assert "peer uid 1001" in str(hardening.same_user(fake, uid=1000, read_uid=lambda s: 1001))
        assert "fail-closed" in str(hardening.same_user(fake, uid=1000, read_uid=lambda s: None))

        def broken(sock: socket.socket) -> int:
            raise OSError("ENOTCONN")

        assert "refused" in str(hardening.same_user(fake, uid=1000, read_uid=broken))
    finally:
        fake.close()


@pytest.mark.skipif(not hasattr(socket, "SO_PEERCRED"), reason="Linux SO_PEERCRED")
def test_peer_uid_reads_the_real_credentials_of_a_socketpair() -> None:
    left, right = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        assert hardening.peer_uid(left) == os.geteuid()
    finally:
        left.close()
        right.close()


def _connect(path: Path) -> socket.socket:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(5.0)
    client.connect(str(path))
    return client


def test_a_connection_from_another_user_is_closed_unread(tmp_path: Path) -> None:
    inbox: queue.Queue[object] = queue.Queue()
    other_user = lambda sock: hardening.same_user(sock, read_uid=lambda s: os.geteuid() + 1)  # noqa: E731
    server = BridgeServer(tmp_path / "d.sock", inbox, peer_check=other_user).start()
    try:
        client = _connect(server.path)
        hello = protocol.encode(protocol.Hello(pid=1, directory="/x"))
        with contextlib.suppress(OSError):  # already closed by the daemon: fine
            client.sendall(hello)
        try:
            answer = client.recv(100)
        except ConnectionResetError:  # closed with our hello unread
            answer = b""
        assert answer == b""  # closed, no welcome
        client.close()
        deadline = time.monotonic() + 30  # a poll: returns as soon as it holds
        while server.counters().rejected < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.counters().rejected == 1
        assert server.counters().lines == 0
        assert drain(inbox) == []
    finally:
        server.stop()


def test_the_own_user_is_welcomed(tmp_path: Path) -> None:
    inbox: queue.Queue[object] = queue.Queue()
    with BridgeServer(tmp_path / "d.sock", inbox) as server:
        client = _connect(server.path)
        client.sendall(protocol.encode(protocol.Hello(pid=1, directory="/x")))
        assert b'"welcome"' in client.recv(1000)
        client.close()
        assert server.counters().rejected == 0


# -- private files ---------------------------------------------------------------------------


def test_socket_dir_is_0700_and_socket_0600_even_from_an_open_dir(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o755)
    os.chmod(run, 0o755)
    with BridgeServer(run / "d.sock", queue.Queue()) as server:
        assert mode(run) == 0o700
        assert mode(server.path) == 0o600


def test_a_socket_dir_of_another_user_is_refused(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(hardening.os, "geteuid", lambda: 4242)
    with pytest.raises(hardening.NotPrivateError, match="belongs to uid"):
        BridgeServer(tmp_path / "run" / "d.sock", queue.Queue()).start()


def test_state_is_created_private_and_older_open_files_are_tightened(
    tmp_path: Path, umask_restored: None
) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    os.chmod(state, 0o755)
    (state / "log").mkdir()
    old_log = state / "log" / "daemon.log.1"
    old_log.write_text("old\n")
    os.chmod(old_log, 0o644)
    store_path = state / "autoretry.db"
    hardening.private_state(store_path, state / "log")
    assert mode(state) == 0o700 and mode(state / "log") == 0o700 and mode(old_log) == 0o600
    store = Store.open(store_path)
    try:
        store.set_enabled(True, __import__("datetime").datetime.now())
        for suffix in ("", "-wal", "-shm"):
            path = store_path.with_name(store_path.name + suffix)
            if path.exists():
                assert mode(path) == 0o600, path
    finally:
        store.close()


def test_the_daemon_log_is_created_0600(tmp_path: Path, umask_restored: None) -> None:
    from dataclasses import replace

    from opencode_autoretry.config.settings import Settings

    settings = replace(Settings(), store=tmp_path / "s" / "a.db", log_dir=tmp_path / "s" / "log")
    hardening.private_state(settings.store, settings.log_dir)
    root = logging.getLogger()
    before = list(root.handlers)
    try:
        setup_logging(settings, foreground=False)
        logging.getLogger("opencode_autoretry.test").warning("hello")
        assert mode(settings.log_dir) == 0o700
        assert mode(settings.log_dir / "daemon.log") == 0o600
    finally:
        for handler in root.handlers[len(before):]:
            handler.close()
            root.removeHandler(handler)


# -- what the logs hold ----------------------------------------------------------------------


def test_logs_hold_no_conversation_and_no_credential(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    h = Harness(tmp_path)
    h.hello()
    sid = h.session()
    user = h.user(sid, f"{CONVERSATION} key={SECRET}")
    h.chat(sid, user, f"{CONVERSATION} key={SECRET}")
    h.status(sid, "busy")
    h.event("message.part.delta", sessionID=sid, messageID="msg_x", partID="prt_x",
            field="text", delta=f"{CONVERSATION} {SECRET}")
    h.failed_step(sid, user, disconnect())
    h.error_then_idle(sid, {"name": "APIError", "data": {
        "message": "Connection reset by server", "responseHeaders": {"authorization": SECRET},
        "responseBody": SECRET, "isRetryable": True}})
    h.advance(6)
    assert h.prompts(), "the scenario must reach a send"
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert logged, "the daemon logs its decisions"
    assert SECRET not in logged
    # The repetition detector quotes its block, cut to a short excerpt; never more than that.
    assert CONVERSATION[:120] not in logged
    assert max(len(r.getMessage()) for r in caplog.records) < 300


def test_bad_lines_are_logged_without_their_content(tmp_path: Path, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    inbox: queue.Queue[object] = queue.Queue()
    with BridgeServer(tmp_path / "d.sock", inbox) as server:
        client = _connect(server.path)
        lines = [
            json.dumps({"v": SECRET * 100, "type": "hello"}),
            json.dumps({"v": 1, "type": SECRET * 100}),
            json.dumps({"v": 1, "type": 5, "text": SECRET}),
            '{"oops ' + SECRET,
            json.dumps([SECRET]),
        ]
        client.sendall(("\n".join(lines) + "\n").encode())
        client.close()
        deadline = time.monotonic() + 30  # a poll: returns as soon as it holds
        while server.counters().lines < len(lines) and time.monotonic() < deadline:
            time.sleep(0.01)
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert server.counters().garbage == 4 and server.counters().unknown == 1
    assert SECRET * 2 not in logged
    assert max(len(r.getMessage()) for r in caplog.records) < 300


# -- OpenCode's DB ---------------------------------------------------------------------------


def _hashes(db: Path) -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for suffix in ("", "-wal"):
        path = db.with_name(db.name + suffix)
        found[suffix] = hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None
    return found


def test_the_daemon_leaves_opencode_db_byte_identical(tmp_path: Path) -> None:
    h = Harness(tmp_path)
    h.hello()
    sid, user = h.busy_turn()
    h.failed_step(sid, user, disconnect())
    before = _hashes(h.settings.opencode_db)
    h.error_then_idle(sid, disconnect())
    for _ in range(8):
        h.clock.advance(1.0)
        h.loop.tick()  # rows.clock untouched: no write of ours to OpenCode's DB
    h.loop.beat(h.clock.now())
    assert h.prompts(), "the daemon read the DB and decided to continue"
    assert _hashes(h.settings.opencode_db) == before


def test_status_and_the_heartbeat_carry_the_dropped_line_counts(tmp_path: Path) -> None:
    from datetime import timedelta

    from opencode_autoretry.daemon.control import render_status, status_report
    from opencode_autoretry.store.database import StoreView

    inbox: queue.Queue[object] = queue.Queue()
    with BridgeServer(tmp_path / "d.sock", inbox) as server:
        h = Harness(tmp_path)
        h.loop._bridge = server  # the real server's counters, the fake clock and store
        client = _connect(server.path)
        client.sendall(b"not json\n" + protocol.encode(protocol.Stats(dropped=3, queued=0,
                                                                      unknown=1)))
        deadline = time.monotonic() + 30  # a poll: returns as soon as it holds
        while server.counters().lines < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        client.close()
    h.hello()
    for item in drain(inbox):
        if type(item).__name__ == "BridgeMessage":
            h.send(item.message)
    h.loop.beat(h.clock.now())
    view = StoreView.open(h.settings.store)
    try:
        report = status_report(view, h.clock.now() + timedelta(seconds=1))
    finally:
        view.close()
    assert report["bridge_lines"]["garbage"] == 1 and report["bridge_lines"]["lines"] == 2
    assert report["bridges"][0]["dropped"] == 3 and report["bridges"][0]["unknown"] == 1
    text = render_status(report)
    assert "lines dropped: garbage 1" in text and "dropped 3 events, 1 bad lines" in text


@pytest.mark.parametrize(("text", "kept"), [
    ("Incorrect API key provided: sk-proj-AbCdEf1234567890", "Incorrect API key provided: "),
    ("header Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig", "Authorization: [redacted]"),
    ("sent Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig", "sent Bearer [redacted]"),
    ('{"api_key": "abcdef123456"}', '"api_key": "[redacted]'),
    ("aws AKIAIOSFODNN7EXAMPLE here", "aws [redacted] here"),
    ("password=hunter22 ok", "password=[redacted] ok"),
])
def test_credential_shapes_are_redacted(text: str, kept: str) -> None:
    cleaned = hardening.redact(text)
    assert kept in cleaned and "[redacted]" in cleaned
    for secret in ("1234567890", "payload.sig", "abcdef123456", "IOSFODNN7", "hunter22"):
        assert secret not in cleaned


def test_ids_and_ordinary_lines_are_left_alone() -> None:
    line = ("decision 3 ses_dd3a39d72ffewL0jVgOlcOtfG2: inject_at: disconnect (Connection reset "
            "by server; ECONNRESET) msg_dd3a39d72ffe1 task-list")
    assert hardening.redact(line) == line


def test_the_daemon_log_redacts_a_key_in_a_provider_error(tmp_path: Path, umask_restored) -> None:
    from dataclasses import replace

    from opencode_autoretry.config.settings import Settings

    settings = replace(Settings(), store=tmp_path / "s" / "a.db", log_dir=tmp_path / "s" / "log")
    root = logging.getLogger()
    before = list(root.handlers)
    try:
        setup_logging(settings, foreground=True)
        # The shape of a decision line whose reason quotes a provider's error message.
        logging.getLogger("opencode_autoretry.daemon.actions").info(
            "decision %s %s: %s", 1, "ses_1", f"inject_at: server_error (bad key {SECRET})")
        for handler in root.handlers[len(before):]:
            handler.flush()
        logged = (settings.log_dir / "daemon.log").read_text()
    finally:
        for handler in root.handlers[len(before):]:
            handler.close()
            root.removeHandler(handler)
    assert "server_error (bad key [redacted])" in logged
    assert SECRET not in logged


def test_a_shared_socket_dir_like_tmp_is_refused_not_locked(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    with pytest.raises(hardening.NotPrivateError, match="shared directory"):
        BridgeServer(shared / "d.sock", queue.Queue()).start()
    assert mode(shared) == 0o1777  # left as it was: chmod 0700 would lock everyone else out


# -- state written by commands other than `run` (issue 20) ------------------------------------


def _cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "AUTORETRY_HOME": str(home), "OPENCODE_DB": str(home / "oc.db"),
           "AUTORETRY_CONFIG": str(home / "none.toml"), "XDG_CACHE_HOME": str(home / "cache"),
           "XDG_STATE_HOME": str(home / "state"), "XDG_DATA_HOME": str(home / "data")}
    command = [sys.executable, "-c", "import os, sys; os.umask(0o022); "
               "from opencode_autoretry.cli.main import main; sys.exit(main())", *args]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120,
                          check=False)


def _open_to_others(root: Path) -> list[str]:
    return [f"{p.relative_to(root)} {oct(mode(p))}" for p in [root, *root.rglob("*")]
            if mode(p) & 0o077]


@pytest.mark.parametrize("args", [["on"], ["off", "--session", "ses_a"], ["diagnose"]])
def test_commands_other_than_run_create_private_state(tmp_path: Path, args: list[str]) -> None:
    home = tmp_path / "home"
    done = _cli(home, *args)
    assert home.is_dir() and any(home.rglob("*")), (done.stdout, done.stderr)
    assert _open_to_others(home) == [], done.stderr


@pytest.mark.parametrize("command", ["exec", "diagnose", "timeline", "status", "on", "notify"])
def test_the_cli_sets_umask_077_for_state_writing_commands(command: str) -> None:
    from click.testing import CliRunner

    from opencode_autoretry.cli.main import main

    os.umask(0o022)
    CliRunner().invoke(main, [command, "--help"])
    assert os.umask(0o022) == 0o077


def test_bridge_install_keeps_the_users_umask() -> None:
    from click.testing import CliRunner

    from opencode_autoretry.cli.main import main

    os.umask(0o022)
    CliRunner().invoke(main, ["bridge", "--help"])
    assert os.umask(0o022) == 0o022
