"""The daemon against a real MariaDB primary: semi-sync, byte-identical files, order."""

import os
import threading

import pytest

from mysqlbackup import speedups
from mysqlbackup.sandbox import REPL_PASSWORD
from mysqlbackup.source.spec import SourceSpec
from mysqlbackup.stream.daemon import StreamOptions, run_stream
from tests.helpers import (Daemon, current_binlog, read, same_except_in_use_flag, wait_for,
                           wait_semi_sync_client)


@pytest.mark.parametrize("path", ["compiled", "pure Python"])
def test_500_semi_sync_transactions_and_identical_files(primary, tmp_path, monkeypatch, path):
    if path == "pure Python":
        monkeypatch.setenv(speedups.PURE_ENV, "1")  # the daemon's environment
    elif speedups.compiled is None:
        pytest.skip(speedups.describe())
    primary.execute("CREATE DATABASE IF NOT EXISTS t500",
                    "CREATE TABLE IF NOT EXISTS t500.t (id INT PRIMARY KEY AUTO_INCREMENT, "
                    "v VARCHAR(40))")
    start = current_binlog(primary)
    daemon = Daemon(primary, tmp_path / "dir", "--start-file", start).start()
    try:
        wait_semi_sync_client(primary)
        yes0 = int(primary.status("Rpl_semi_sync_master_yes_tx"))
        no0 = int(primary.status("Rpl_semi_sync_master_no_tx"))
        conn = primary.root()
        with conn.cursor() as cur:
            for i in range(500):
                cur.execute("INSERT INTO t500.t (v) VALUES (%s)", (f"row {i}",))
        conn.close()
        assert int(primary.status("Rpl_semi_sync_master_yes_tx")) - yes0 == 500
        assert int(primary.status("Rpl_semi_sync_master_no_tx")) - no0 == 0
        primary.execute("FLUSH BINARY LOGS")
        files = primary.binlog_files()
        newest = files[-1]
        # the daemon makes the new file when the rotation reaches it, and the server
        # appends its BINLOG_CHECKPOINT event to that file a moment later
        local = os.path.join(daemon.directory, newest)
        wait_for(lambda: os.path.exists(local) and same_except_in_use_flag(
            local, primary.binlog_path(newest)), what="the rotated file, byte for byte")
    finally:
        assert daemon.stop() == 0, daemon.output()
    assert f"stream path: {path}" in daemon.output()
    closed = files[files.index(start):-1]
    assert closed and primary.binlog_files() == files
    for name in closed:
        assert read(os.path.join(daemon.directory, name)) == read(primary.binlog_path(name)), name


class Recorder:
    """Records fsync and ACK calls around the real writer and client, in order."""

    def __init__(self):
        self.calls = []
        self.lock = threading.Lock()

    def fsync(self, fd):
        size = os.fstat(fd).st_size  # bytes written before the fsync began: all covered
        os.fsync(fd)
        path = os.readlink(f"/proc/self/fd/{fd}")
        with self.lock:
            self.calls.append(("fsync", os.path.basename(path), size))

    def wrap_ack(self, send_ack):
        def ack(file, pos):
            with self.lock:
                self.calls.append(("ack", file, pos))
            send_ack(file, pos)
        return ack


def test_ack_is_sent_only_after_fsync_covers_it(primary, tmp_path):
    primary.execute("CREATE DATABASE IF NOT EXISTS tack",
                    "CREATE TABLE tack.t (id INT PRIMARY KEY AUTO_INCREMENT, v INT)")
    rec, stop = Recorder(), threading.Event()

    def instrument(syncer):
        syncer.writer._fsync = rec.fsync
        syncer.client.send_ack = rec.wrap_ack(syncer.client.send_ack)

    opts = StreamOptions(SourceSpec("127.0.0.1", primary.port, "repl", REPL_PASSWORD), 78,
                         str(tmp_path / "dir"), start_file=current_binlog(primary))
    errors = []
    thread = threading.Thread(target=lambda: _run(opts, stop, instrument, errors))
    thread.start()
    try:
        wait_semi_sync_client(primary)
        _load(primary, "tack.t", threads=4, per_thread=50)
    finally:
        stop.set()
        thread.join(30)
    assert not errors, errors
    acks = [c for c in rec.calls if c[0] == "ack"]
    assert len(acks) >= 10
    synced = {}
    for kind, name, value in rec.calls:
        if kind == "fsync":
            synced[name] = max(synced.get(name, 0), value)
        else:
            assert synced.get(name, 0) >= value, f"ACK {name}:{value} before its fsync"


def _run(opts, stop, instrument, errors):
    try:
        run_stream(opts, stop=stop.is_set, on_syncer=instrument)
    except Exception as e:  # surfaced by the test's assertion on ``errors``
        errors.append(e)


def _load(server, table, threads, per_thread):
    def work():
        conn = server.root()
        with conn.cursor() as cur:
            for i in range(per_thread):
                cur.execute(f"INSERT INTO {table} (v) VALUES ({i})")
        conn.close()
    workers = [threading.Thread(target=work) for _ in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(60)
