"""A restart of `mysqlbackup serve` in the middle of a big stream (kill -9 of the
process, then ServeHandle.stop()): the replica reconnects by itself, by GTID, and applies
each transaction once."""

import os
import shutil
import subprocess
import sys
from types import SimpleNamespace

import pytest

from mysqlbackup.archive.codec import PLAIN
from mysqlbackup.archive.importer import import_directory
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.sandbox import free_port
from tests.helpers import REPO, module_primary, wait_for
from tests.serve.world import PASSWORD, attach, caught_up, serve, status

# -- a restart of serve in the middle of a big stream ------------------------------------

BIG = 2000  # transactions of the big stream, 4 rows of 2 KB each: 16 MB, more than
# the TCP buffers between serve and the replica hold


@pytest.fixture(scope="module")
def big_archive(tmp_path_factory):
    """A primary of its own writes BIG transactions into a table without a primary key
    (a transaction applied twice shows as rows twice), over two binlog files, archived.
    At a fifth and at four fifths, an insert into gate.a and gate.b: tables the primary
    made without binlogging them (a replica that has them locked stops applying there;
    between them more than the replica's relay log space and socket buffers hold).
    Returns (archive URL, CHECKSUM TABLE on the primary, first, gate a's, gate b's and
    the last GTID's sequence numbers)."""
    server = module_primary(tmp_path_factory, "serve-big")
    try:
        server.execute("SET SESSION sql_log_bin = 0", "CREATE DATABASE gate",
                       "CREATE TABLE gate.a (id INT)", "CREATE TABLE gate.b (id INT)")
        server.execute("CREATE DATABASE big", "CREATE TABLE big.l (k INT, n INT, pad TEXT)")
        seqs = [_binlog_seq(server)]
        inserts = ["INSERT INTO big.l VALUES " + ",".join(
            f"({i}, {n}, REPEAT('{i}.{n}', 300))" for n in range(4)) for i in range(BIG)]
        fifth = BIG // 5
        for part, gate in ((inserts[:fifth], "a"), (inserts[fifth:4 * fifth], "b")):
            server.execute(*part, f"INSERT INTO gate.{gate} VALUES (1)")
            seqs.append(_binlog_seq(server))
            if gate == "a":
                server.execute("FLUSH BINARY LOGS")
        server.execute(*inserts[4 * fifth:])
        seqs.append(_binlog_seq(server))
        checksum = server.execute("CHECKSUM TABLE big.l")[0][1]
        files = tmp_path_factory.mktemp("serve-big-files")
        for name in server.binlog_files():
            shutil.copyfile(server.binlog_path(name), files / name)
    finally:
        server.stop(remove=True)
    url = f"file://{tmp_path_factory.mktemp('serve-big-archive')}"
    import_directory(ArchiveStore(url), str(files), "db1", echo=lambda line: None, codec=PLAIN)
    return (url, checksum, *seqs)


def _binlog_seq(server):
    return seq_no(server.execute("SELECT @@gtid_binlog_pos")[0][0])


def seq_no(gtid):
    return int(gtid.rpartition("-")[2] or 0)


def received_and_applied(replica):
    """(sequence number the replica received up to, the one it applied up to)."""
    return (seq_no(status(replica)["Gtid_IO_Pos"]),
            seq_no(replica.execute("SELECT @@gtid_slave_pos")[0][0]))


def held_lock(replica, table):
    """A connection to the replica that holds ``table`` locked (its SQL thread waits
    there; what it receives stops at its small relay log space)."""
    conn = replica.root()
    with conn.cursor() as cur:
        cur.execute(f"LOCK TABLES {table} WRITE")
    return conn


def mid_way(replica, gate, last):
    """Wait until the replica applied all before ``gate`` (and waits at it); True when
    it neither received nor applied the stream's end (checked once serve is gone)."""
    wait_for(lambda: received_and_applied(replica)[1] == gate - 1, timeout=30,
             what=f"the replica at transaction {gate - 1}")


@pytest.mark.server
def test_restart_of_serve_mid_stream(big_archive, replica, tmp_path):
    """serve killed (kill -9 of `mysqlbackup serve`), then stopped (ServeHandle.stop)
    while the replica is mid-way through a big stream (when serve is gone, it has
    neither received nor applied the end); serve started again on the same port each
    time: the replica reconnects by GTID by itself and ends with the primary's table,
    every transaction applied once."""
    url, checksum, first, gate_a, gate_b, last = big_archive
    replica.execute("CREATE DATABASE gate", "CREATE TABLE gate.a (id INT)",
                    "CREATE TABLE gate.b (id INT)")
    locks = [held_lock(replica, "gate.a"), held_lock(replica, "gate.b")]
    try:
        _kill_stop_and_restart(replica, big_archive, locks, tmp_path)
    finally:
        for conn in locks:
            if conn.open:
                conn.close()


def _kill_stop_and_restart(replica, big_archive, locks, tmp_path):
    url, checksum, first, gate_a, gate_b, last = big_archive
    port = free_port()
    (tmp_path / "pw").write_text(PASSWORD + "\n")
    proc = subprocess.Popen([sys.executable, "-m", "mysqlbackup", "serve", "--archive", url,
                             "--listen", f"127.0.0.1:{port}", "--replica-password-file",
                             str(tmp_path / "pw"), "--poll-interval", "0"],
                            env=dict(os.environ, PYTHONPATH=REPO), stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stderr.readline().startswith("serving db1")
        attach(replica, SimpleNamespace(host="127.0.0.1", port=port))
        mid_way(replica, gate_a, last)
    finally:
        proc.kill()  # SIGKILL: its listener and the dump's socket go with it
        proc.wait(timeout=10)
        proc.stderr.close()
    received, applied = killed = received_and_applied(replica)
    assert first < applied == gate_a - 1 < received < last, killed
    with serve(url, ("127.0.0.1", port)) as handle:
        locks[0].close()  # the replica goes on, and reconnects by itself
        mid_way(replica, gate_b, last)
    received, applied = received_and_applied(replica)
    assert applied == gate_b - 1 < received < last and handle.dumps >= 1, (received, applied)
    with serve(url, ("127.0.0.1", port)) as handle:
        locks[1].close()
        caught_up(replica, f"0-1-{last}")
        assert replica.execute("CHECKSUM TABLE big.l")[0][1] == checksum
        assert replica.execute("SELECT COUNT(*), COUNT(DISTINCT k, n), SUM(n) FROM big.l") \
            == ((4 * BIG, 4 * BIG, 6 * BIG),)
        row = status(replica)
        assert (row["Last_IO_Errno"], row["Last_SQL_Errno"], handle.dumps) == (0, 0, 1)
