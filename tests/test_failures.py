"""Crashes, gaps, reconnects and bad input against real servers."""

import os
import random
import shutil
import threading
import time

import pytest

from mysqlbackup.binlog import events as ev
from mysqlbackup.sandbox import free_port
from tests.helpers import (Daemon, caught_up, current_binlog, maria_gtids, read, run_cli,
                           same_except_in_use_flag, wait_for)


class Load(threading.Thread):
    """Multi-statement transactions and an occasional rotation, until stopped."""

    def __init__(self, server, db):
        super().__init__(daemon=True)
        self.server, self.db, self.stopped, self.count = server, db, threading.Event(), 0
        server.execute(f"CREATE DATABASE {db}",
                       f"CREATE TABLE {db}.t (id INT PRIMARY KEY AUTO_INCREMENT, v TEXT)")

    def run(self):
        conn = self.server.root(autocommit=False)
        with conn.cursor() as cur:
            while not self.stopped.is_set():
                for i in range(3):
                    cur.execute(f"INSERT INTO {self.db}.t (v) VALUES (REPEAT('x', {i * 300}))")
                conn.commit()
                self.count += 1
                if self.count % 150 == 0:
                    cur.execute("FLUSH BINARY LOGS")
        conn.close()

    def stop(self):
        self.stopped.set()
        self.join(30)


def assert_identical_and_continuous(server, directory, start):
    files = server.binlog_files()
    files = files[files.index(start):]
    for name in files[:-1]:
        assert read(os.path.join(directory, name)) == read(server.binlog_path(name)), name
    assert same_except_in_use_flag(os.path.join(directory, files[-1]),
                                   server.binlog_path(files[-1]))
    local = maria_gtids([os.path.join(directory, n) for n in files])
    seqs = [seq for domain, seq in local if domain == 0]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
    assert local == maria_gtids([server.binlog_path(n) for n in files])


def test_kill_9_under_load_keeps_files_identical(make_server, tmp_path):
    server = make_server(semi_sync_timeout_ms=300)
    start = current_binlog(server)
    load = Load(server, "crash")
    load.start()
    rng = random.Random(7)
    try:
        for delay in (0.2, 0.5, 0.9, rng.uniform(0.1, 1.2), rng.uniform(0.1, 1.2)):
            daemon = Daemon(server, tmp_path / "dir", *(() if os.path.isdir(
                tmp_path / "dir") else ("--start-file", start))).start()
            time.sleep(delay)
            daemon.kill9()
        daemon = Daemon(server, tmp_path / "dir").start()
        time.sleep(0.5)
        wait_for(lambda: load.count > 50, what="the load committing through the kills")
    finally:
        load.stop()
    try:
        server.execute("FLUSH BINARY LOGS")
        # the server writes BINLOG_CHECKPOINT into the new file some time after the FLUSH
        # (later under load): the copy must stay equal for a whole second before the stop
        wait_for(lambda: caught_up(server, daemon.directory, settle=1.0),
                 what="the daemon to catch up")
    finally:
        assert daemon.stop() == 0, daemon.output()
    assert "cut " in daemon.output() or "streaming from" in daemon.output()
    assert_identical_and_continuous(server, daemon.directory, start)


def test_source_restart_reconnects_and_resumes(make_server, tmp_path):
    server = make_server()
    start = current_binlog(server)
    # streaming before the source goes: a daemon that never connected gives up at once
    daemon = Daemon(server, tmp_path / "dir", "--start-file", start).start().wait_streaming()
    try:
        load = Load(server, "restart")
        load.start()
        wait_for(lambda: load.count > 20, what="commits before the restart")
        load.stop()
        server.stop()
        time.sleep(1.0)  # the source away a while: the daemon's reconnects fail meanwhile
        server.start()  # same datadir and port; the server begins a new binlog file
        load = Load(server, "restart2")
        load.start()
        wait_for(lambda: load.count > 20, what="commits after the restart")
        load.stop()
        server.execute("FLUSH BINARY LOGS")
        wait_for(lambda: caught_up(server, daemon.directory), timeout=60, what="catch-up")
    finally:
        assert daemon.stop() == 0, daemon.output()
    assert "reconnecting" in daemon.output()
    assert_identical_and_continuous(server, daemon.directory, start)


def test_purged_binlog_is_a_loud_resync_error(make_server, tmp_path):
    server = make_server()
    server.execute("CREATE DATABASE p", "CREATE TABLE p.t (a INT)", "INSERT INTO p.t VALUES (1)")
    daemon = Daemon(server, tmp_path / "dir").start()
    wait_for(lambda: caught_up(server, daemon.directory), what="catch-up")
    assert daemon.stop() == 0
    before = {n: read(os.path.join(daemon.directory, n)) for n in os.listdir(daemon.directory)
              if n.startswith("binlog.")}
    server.execute("INSERT INTO p.t VALUES (2)", "FLUSH BINARY LOGS", "FLUSH BINARY LOGS")

    def purged():  # MariaDB keeps a file until its binlog checkpoint is written
        server.execute(f"PURGE BINARY LOGS TO '{current_binlog(server)}'")
        return max(before) not in server.binlog_files()
    wait_for(purged, timeout=30, interval=0.3, what="PURGE BINARY LOGS to take effect")
    result = run_cli("stream", "--source", server.url, "--server-id", "77", "--dir",
                     daemon.directory)
    assert result.returncode == 7, result.stderr
    last = max(before)
    assert "resync required" in result.stderr and "error 1236" in result.stderr
    assert f"at {last}:" in result.stderr
    after = {n: read(os.path.join(daemon.directory, n)) for n in os.listdir(daemon.directory)
             if n.startswith("binlog.")}
    assert after == before  # nothing written past the gap


def one_error_line(result, code, *needles):
    assert result.returncode == code, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mysqlbackup: error:"), result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def stream_args(url, directory):
    return ("stream", "--source", url, "--server-id", "91", "--dir", str(directory))


def test_wrong_password(primary, tmp_path):
    result = run_cli(*stream_args(primary.url, tmp_path / "d"), password="wrong")
    one_error_line(result, 3, "access denied for repl@127.0.0.1")


@pytest.mark.server
def test_unreachable_host(tmp_path):
    result = run_cli(*stream_args(f"mysql://repl@127.0.0.1:{free_port()}", tmp_path / "d"))
    one_error_line(result, 3, "cannot connect to 127.0.0.1:")


def test_server_without_binlog(make_server, tmp_path):
    server = make_server(log_bin=False, semi_sync=False)
    result = run_cli(*stream_args(server.url, tmp_path / "d"))
    one_error_line(result, 3, "binary logging disabled")


def test_non_binlog_file_in_dir(primary, tmp_path, shared_binlog):
    directory = tmp_path / "d"
    directory.mkdir()
    shutil.copyfile(shared_binlog("mysql-binlog-connector-rust/non-binlog"),
                    directory / "binlog.000001")
    one_error_line(run_cli(*stream_args(primary.url, directory)), 8, "bad magic")


def test_another_source_under_the_same_dir_is_refused(primary, make_server, tmp_path):
    other = make_server(server_id=2)
    daemon = Daemon(primary, tmp_path / "d", "--start-file", current_binlog(primary)).start()
    wait_for(lambda: os.path.exists(tmp_path / "d" / "mysqlbackup.state.json"), what="state")
    assert daemon.stop() == 0
    result = run_cli(*stream_args(other.url, tmp_path / "d"))
    one_error_line(result, 8, "holds the binlogs of source server-id-1", "server-id-2")


def test_an_active_copy_may_lack_only_the_servers_later_binlog_checkpoints(tmp_path):
    """A daemon stopped at its catch-up may not have the binlog checkpoint event MariaDB
    writes a moment after a FLUSH: the copy is still the server's file; any other event
    missing from it is not."""
    from tests.helpers import make_event
    fde = bytearray(b"\xfebin" + make_event(ev.FORMAT_DESCRIPTION, b"\x04\x00" + b"x" * 60, 4))
    fde[21] |= ev.LOG_EVENT_BINLOG_IN_USE_F  # the event's flags: the server's says in use
    copy = bytearray(fde)
    copy[21] &= ~ev.LOG_EVENT_BINLOG_IN_USE_F
    copy = bytes(copy)
    checkpoint = make_event(ev.MARIA_BINLOG_CHECKPOINT, b"\x0b\x00\x00\x00binlog.0002", 200)
    query = make_event(ev.QUERY, b"q" * 20, 300)
    local, remote = tmp_path / "local", tmp_path / "remote"
    local.write_bytes(copy)
    for tail, same in ((b"", True), (checkpoint, True), (checkpoint + checkpoint, True),
                       (query, False), (checkpoint + query, False), (checkpoint[:10], False)):
        remote.write_bytes(bytes(fde) + tail)
        assert same_except_in_use_flag(str(local), str(remote)) is same, tail
