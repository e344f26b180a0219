"""Crash recovery of a local directory: cut torn events and incomplete transactions."""

import os
import shutil

import pytest

from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.scan import iter_events
from mysqlbackup.errors import LocalStateError
from mysqlbackup.localdir import files
from mysqlbackup.localdir.files import list_binlogs, recover, sized_binlogs
from mysqlbackup.localdir.state import State, load_state, save_state
from tests.helpers import read

MARIA = "rust_mysql_common/mariadb-bin.000001"
_BOUNDARY_AFTER = {ev.FORMAT_DESCRIPTION, ev.MARIA_GTID_LIST, ev.MARIA_BINLOG_CHECKPOINT, ev.XID}


def boundaries(data):
    """Ends of events after which no transaction is open, derived from event types."""
    out = [4]
    for off, event in iter_events(data, 4, None):
        if event[4] in _BOUNDARY_AFTER:
            out.append(off + len(event))
    return out


def test_every_cut_resumes_at_the_last_whole_transaction(tmp_path, shared_binlog):
    data = read(shared_binlog(MARIA))
    bounds = boundaries(data)
    assert len(bounds) == 6  # 4, FDE, GTID_LIST, CHECKPOINT, XID, XID
    path = tmp_path / "mariadb-bin.000001"
    for cut in range(4, len(data) + 1):
        path.write_bytes(data[:cut])
        point = recover(str(tmp_path), None)
        expected = max(b for b in bounds if b <= cut)
        assert (point.file, point.pos, point.cut_bytes) == (path.name, expected, cut - expected)


def test_gtids_at_the_resume_point(tmp_path, shared_binlog):
    data = read(shared_binlog(MARIA))
    (tmp_path / "mariadb-bin.000001").write_bytes(data)
    point = recover(str(tmp_path), None)
    assert point.pos == len(data) and point.cut_bytes == 0
    gtids = [ev.parse_maria_gtid(e, True) for _, e in iter_events(data, 4, None)
             if e[4] == ev.MARIA_GTID]
    last = gtids[-1]
    assert point.gtids.domains[last.domain] == (last.server_id, last.seq)


def test_crc_damage_after_the_checkpoint_is_cut(tmp_path, shared_binlog):
    data = bytearray(read(shared_binlog(MARIA)))
    bounds = boundaries(bytes(data))
    data[bounds[-1] - 10] ^= 0x55  # inside the last XID event
    (tmp_path / "mariadb-bin.000001").write_bytes(data)
    point = recover(str(tmp_path), None)
    assert point.pos == bounds[-2]
    assert "CRC32 mismatch" in point.cut_reason


def test_scan_starts_at_the_checkpoint(tmp_path, shared_binlog):
    data = read(shared_binlog(MARIA))
    bounds = boundaries(data)
    (tmp_path / "mariadb-bin.000001").write_bytes(data)
    state = State(file="mariadb-bin.000001", pos=bounds[-2], gtid="0-1-1", flavor="mariadb")
    point = recover(str(tmp_path), state)
    assert point.pos == len(data)
    assert str(point.gtids).startswith("0-")


def test_checkpoint_beyond_the_file_is_refused(tmp_path, shared_binlog):
    data = read(shared_binlog(MARIA))
    (tmp_path / "mariadb-bin.000001").write_bytes(data[:200])
    state = State(file="mariadb-bin.000001", pos=500, gtid="", flavor="mariadb")
    with pytest.raises(LocalStateError, match="local data was lost"):
        recover(str(tmp_path), state)


def test_file_ending_with_rotate_resumes_in_the_next_file(tmp_path, shared_binlog):
    shutil.copyfile(shared_binlog("gh-ost/mysql-bin.000066"), tmp_path / "mysql-bin.000066")
    point = recover(str(tmp_path), None)
    assert (point.file, point.pos) == ("mysql-bin.000067", 4)


def test_foreign_files_are_refused(tmp_path, shared_binlog):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(LocalStateError, match="not a binlog file or a mysqlbackup file"):
        list_binlogs(str(tmp_path))


def test_binlog_named_non_binlog_is_refused(tmp_path, shared_binlog):
    shutil.copyfile(shared_binlog("mysql-binlog-connector-rust/non-binlog"),
                    tmp_path / "binlog.000001")
    with pytest.raises(LocalStateError, match="bad magic"):
        list_binlogs(str(tmp_path))


def test_state_round_trip(tmp_path):
    state = State(file="binlog.000003", pos=1234, gtid="0-1-9", flavor="mariadb",
                  last_ack={"file": "binlog.000003", "pos": 1234, "time": 1.0})
    save_state(str(tmp_path), state)
    assert load_state(str(tmp_path)) == state
    assert not (tmp_path / "mysqlbackup.state.json.tmp").exists()


def test_a_file_removed_while_listed_is_left_out(tmp_path, monkeypatch):
    # a running daemon's archiver (--keep-local) removes a sealed file while status lists
    (tmp_path / "binlog.000002").write_bytes(ev.MAGIC + bytes(96))
    listed = os.listdir(str(tmp_path)) + ["binlog.000001"]  # gone before its stat
    monkeypatch.setattr(files.os, "listdir", lambda path: listed)
    assert sized_binlogs(str(tmp_path)) == [("binlog.000002", 100)]
    assert list_binlogs(str(tmp_path)) == ["binlog.000002"]
    monkeypatch.setattr(files, "_check_magic", lambda path: os.remove(path) or open(path))
    assert list_binlogs(str(tmp_path)) == []  # gone between its stat and its read
