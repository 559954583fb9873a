"""A read after a -wal write waits until the write's commit is published: the probe, the gate."""

from __future__ import annotations

import os
import shutil
import struct

import pytest
from opencode_rows import OpenCodeRows
from watch_helpers import fds_to, linux

from opencode_autoretry.daemon.intake.commit_gate import CommitGate, CommitProbe


def snapshot(tmp_path, name: str = "copy.db") -> CommitProbe:
    """A probe on a copy of a real DB's -shm and -wal files, taken after a commit."""
    rows = OpenCodeRows(tmp_path / "opencode.db")
    rows.user(rows.session("s"))
    rows.commit()
    for suffix in ("-shm", "-wal"):
        shutil.copy(tmp_path / f"opencode.db{suffix}", tmp_path / f"{name}{suffix}")
    rows.close()
    return CommitProbe(tmp_path / name)


def index_header(probe: CommitProbe) -> tuple[int, int, bytes]:
    """(page size, last published frame, salts) of the copy's index header."""
    header = probe.shm_path.read_bytes()[:48]
    page = struct.unpack_from("=H", header, 14)[0]
    return (65536 if page == 1 else page), struct.unpack_from("=I", header, 16)[0], header[32:40]


def write_frame_header(probe: CommitProbe, index: int, salts: bytes, page_number: int = 2) -> None:
    """A frame header at frame ``index`` (0-based) of the copy's -wal file, as a writer's."""
    page, _, _ = index_header(probe)
    with probe.wal_path.open("r+b") as wal:
        wal.seek(32 + index * (24 + page))
        wal.write(struct.pack(">II", page_number, 0) + salts + b"\0" * 8)


def test_a_published_commit_is_not_in_flight(tmp_path):
    probe = snapshot(tmp_path)
    try:
        page, last, salts = index_header(probe)
        assert page >= 512 and last >= 1  # a real header, the commit's frames published
        assert probe.look() == (struct.pack("=I", last) + salts, False)
    finally:
        probe.close()


def test_a_frame_after_the_published_ones_is_a_commit_in_flight(tmp_path):
    probe = snapshot(tmp_path)
    try:
        _, last, salts = index_header(probe)
        write_frame_header(probe, last, salts)
        assert probe.look() == (struct.pack("=I", last) + salts, True)
    finally:
        probe.close()


def test_a_stale_frame_of_an_older_generation_is_not(tmp_path):
    probe = snapshot(tmp_path)
    try:
        _, last, salts = index_header(probe)
        older = struct.pack(">I", struct.unpack(">I", salts[:4])[0] - 1) + salts[4:]
        write_frame_header(probe, last, older)
        assert not probe.look()[1]
        write_frame_header(probe, last, salts, page_number=0)  # zeros, not a frame
        assert not probe.look()[1]
    finally:
        probe.close()


def test_an_index_header_being_written_is_in_flight(tmp_path):
    probe = snapshot(tmp_path)
    try:
        shm = bytearray(probe.shm_path.read_bytes())
        shm[48 + 16] ^= 1  # the second copy (written first) differs from the first
        probe.shm_path.write_bytes(bytes(shm))
        assert probe.look() == (None, True)
    finally:
        probe.close()


def test_no_wal_files_nothing_in_flight(tmp_path):
    probe = CommitProbe(tmp_path / "opencode.db")
    assert probe.look() == (None, False)
    (tmp_path / "opencode.db-shm").write_bytes(b"\0" * 10)  # short: not an index
    (tmp_path / "opencode.db-wal").write_bytes(b"")
    assert probe.look() == (None, False)
    probe.close()


@linux
def test_the_probe_keeps_its_fds_until_a_file_is_new(tmp_path):
    probe = snapshot(tmp_path)
    shm, wal = str(probe.shm_path), str(probe.wal_path)
    assert not probe.look()[1]
    first = fds_to(shm) | fds_to(wal)
    assert len(fds_to(shm)) == 1 and len(fds_to(wal)) == 1
    assert not probe.look()[1]
    assert fds_to(shm) | fds_to(wal) == first  # kept open, not reopened (see CommitProbe)
    shutil.copy(probe.shm_path, tmp_path / "new")
    os.replace(tmp_path / "new", probe.shm_path)
    probe.forget_shm()  # the watch saw the name created
    assert fds_to(shm) == set() and len(fds_to(wal)) == 1
    assert not probe.look()[1]
    now = fds_to(shm)
    assert len(now) == 1 and os.readlink(f"/proc/self/fd/{next(iter(now))}") == shm
    probe.forget_wal()
    assert fds_to(wal) == set()
    probe.close()
    assert fds_to(shm) == set()


class FakeProbe:
    def __init__(self) -> None:
        self.published = b"commit 1"
        self.publishing = False

    def look(self) -> tuple[bytes, bool]:
        return self.published, self.publishing


def test_the_gate_answers_at_once_when_no_commit_is_being_published():
    gate = CommitGate(FakeProbe())  # type: ignore[arg-type]
    assert not gate.ready(10.0) and gate.retry_in(10.0) is None
    gate.event(10.0)
    assert gate.ready(10.0)
    assert gate.retry_in(10.0) is None and not gate.ready(10.001)


def test_the_gate_waits_for_the_commit_being_published():
    probe = FakeProbe()
    gate = CommitGate(probe)  # type: ignore[arg-type]
    gate.event(9.0)
    assert gate.ready(9.0)  # commit 1, answered
    probe.publishing = True  # commit 2's frames
    gate.event(10.0)
    assert not gate.ready(10.0)
    assert gate.retry_in(10.0) == pytest.approx(0.001)
    gate.event(10.002)  # more frames
    assert not gate.ready(10.003)
    assert gate.retry_in(10.02) == pytest.approx(0.018)  # no events for long: backed off
    assert gate.retry_in(10.3) == pytest.approx(0.05)
    probe.published, probe.publishing = b"commit 2", False
    assert gate.ready(10.3)
    assert gate.retry_in(10.3) is None


def test_a_commit_published_meanwhile_is_read_while_the_next_one_is_written():
    probe = FakeProbe()
    gate = CommitGate(probe)  # type: ignore[arg-type]
    gate.event(9.0)
    assert gate.ready(9.0)  # commit 1
    probe.published, probe.publishing = b"commit 2", True  # and commit 3 being written
    gate.event(10.0)
    assert gate.ready(10.0)  # commit 2 is readable: not held back by commit 3
    assert not gate.ready(10.001)  # commit 3 still to wait for
    assert gate.retry_in(10.001) == pytest.approx(0.001)
    probe.published, probe.publishing = b"commit 3", False
    assert gate.ready(10.002)


def test_frames_never_published_are_given_up_on():
    probe = FakeProbe()
    gate = CommitGate(probe)  # type: ignore[arg-type]
    gate.event(9.0)
    assert gate.ready(9.0)
    probe.publishing = True  # a rolled-back transaction's frames stay
    gate.event(10.0)
    assert not gate.ready(10.5)
    assert gate.ready(11.0)  # GIVE_UP_S
    assert gate.retry_in(11.0) is None
