"""``mysqlbackup serve``: a real MariaDB replica fed from the archive (file:// and S3
through moto, plain and zstd), by GTID and by file:position, with stop points,
exclusions, a restart of serve at a stop point, a wrong password and a position the
archive lacks; the dump byte for byte a real primary's. TLS and a restart mid-stream
have modules of their own beside this one (fixtures: conftest.py)."""

import logging
import os
import socket
import subprocess
import sys
import time
from types import SimpleNamespace

import pymysql
import pytest
from click.testing import CliRunner

from mysqlbackup.archive.codec import make_codec
from mysqlbackup.archive.importer import import_directory
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.cli import main
from mysqlbackup.sandbox import free_port
from mysqlbackup.source.protocol import split_batch
from replay.serve.server import ServeOptions, start_server
from tests.helpers import REPO, wait_for
from tests.serve.clients import without_in_use
from tests.serve.world import (PASSWORD, attach, caught_up, checksums, growing_archive, rows,
                               serve, status)


def test_full_stream_by_gtid_reaches_the_primary(primary, archive, replica, caplog):
    server, gtids = primary
    caplog.set_level(logging.INFO, logger="replay.serve")
    with serve(archive) as handle:
        attach(replica, handle)
        caught_up(replica, gtids[-1])
        assert checksums(replica) == checksums(server)
        end = handle.wait_end(5)
        assert (end.last_gtid, end.reason) == (gtids[-1], "end of the archive")
        time.sleep(1.2)  # heartbeats keep it connected and idle, with nothing more
        row = status(replica)
        assert (row["Slave_IO_Running"], row["Last_IO_Errno"]) == ("Yes", 0)
        assert replica.execute("SELECT @@gtid_slave_pos")[0][0] == gtids[-1]
        other = dump_from(handle.host, handle.port, "mysqlbackup_serve", PASSWORD,
                          ("binlog.000003", 4), 90)  # a second replica meanwhile
        assert other[-1][4] == 27 and len(other) > 10
        replica.execute("STOP SLAVE")  # the replica goes: logged, and serve goes on
        wait_for(lambda: any("(replica server_id 2): disconnected" in r.getMessage()
                             for r in caplog.records), timeout=10, what="the disconnect logged")
        replica.execute("START SLAVE")
        caught_up(replica, gtids[-1])
        assert handle.dumps == 3  # the replica, the other, the replica again


def test_stop_before_gtid_then_restart_of_serve_continues(primary, archive, replica):
    server, gtids = primary
    port = free_port()
    stop = gtids[1].split("-")
    first = f"{stop[0]}-{stop[1]}-{int(stop[2]) + 1}"  # the first transaction of file 2
    with serve(archive, ("127.0.0.1", port), stop_before_gtid=first) as handle:
        attach(replica, handle)
        caught_up(replica, gtids[1])
        assert rows(replica) == ((1, 1), (2, 2), (3, 3))
        assert handle.wait_end(5).reason == f"stop before GTID {first}"
    with serve(archive, ("127.0.0.1", port)):  # the replica reconnects by itself, by GTID
        caught_up(replica, gtids[-1])
        assert checksums(replica) == checksums(server)


def test_stop_by_datetime_and_by_position(primary, archive, replica, binlog_dir):
    server, gtids = primary
    with serve(archive, stop_datetime="2023-11-14T22:15:00Z") as handle:  # T0 + 100 s
        attach(replica, handle)
        caught_up(replica, gtids[1])
        assert handle.wait_end(5).reason == "stop datetime reached"
    replica.execute("STOP SLAVE", "RESET SLAVE ALL")
    size = os.path.getsize(binlog_dir / "binlog.000002")
    with serve(archive, stop_position=f"binlog.000002:{size - 1}") as handle:
        attach(replica, handle)
        caught_up(replica, gtids[2])
        assert rows(replica) == ((1, 11), (2, 12), (3, 3), (4, 4))


def test_by_file_position_and_a_file_the_archive_lacks(primary, archive, replica):
    server, gtids = primary
    with serve(archive) as handle:
        attach(replica, handle, gtid=False, log_file="binlog.000001", log_pos=4)
        caught_up(replica, gtids[-1])
        assert checksums(replica) == checksums(server)
        replica.execute("STOP SLAVE", "RESET SLAVE ALL")
        attach(replica, handle, gtid=False, log_file="binlog.000009", log_pos=4)
        wait_for(lambda: status(replica)["Last_IO_Errno"] == 1236, timeout=10,
                 what="error 1236")
        assert "Could not find first log file name in binary log index file" in status(
            replica)["Last_IO_Error"]
        assert handle.errors[-1][0] == 1236


def test_exclude_gtids_sends_them_empty(primary, archive, replica):
    """An InnoDB transaction (XID), a MyISAM one (COMMIT) and a DROP TABLE (a statement
    alone, sent as DO 0) excluded: nothing of them applied, the GTID position whole."""
    server, gtids = primary
    domain, server_id, last_of_2 = gtids[2].split("-")
    update = f"{domain}-{server_id}-{last_of_2}"                       # the UPDATE
    myisam = f"{domain}-{server_id}-{int(last_of_2) - 1}"              # INSERT INTO d.m
    drop = gtids[-1]                                                   # the bad DROP
    with serve(archive, exclude_gtids=f"{update},{myisam},{drop}") as handle:
        attach(replica, handle)
        caught_up(replica, gtids[-1])
        assert rows(replica) == ((2, 2), (3, 3), (4, 4), (5, 5), (6, 6))
        assert replica.execute("SELECT COUNT(*) FROM d.m")[0][0] == 0
        assert replica.execute("SELECT id FROM d.gone") == ((7,),)
        assert status(replica)["Last_SQL_Errno"] == 0
        assert handle.wait_end(5).last_gtid == gtids[-1]


def test_a_gtid_state_the_archive_lacks_and_a_wrong_password(primary, archive, replica):
    with serve(archive) as handle:
        replica.execute("SET GLOBAL gtid_slave_pos = '0-1-999'")
        attach(replica, handle)
        wait_for(lambda: status(replica)["Last_IO_Errno"] == 1236, timeout=10,
                 what="error 1236")
        assert "0-1-999, which is not in the master's binlog" in status(replica)[
            "Last_IO_Error"]
        with pytest.raises(pymysql.err.OperationalError) as refused:
            pymysql.connect(host=handle.host, port=handle.port, user="mysqlbackup_serve",
                            password="wrong", connect_timeout=5)
        assert refused.value.args[0] == 1045
        conn = pymysql.connect(host=handle.host, port=handle.port, user="mysqlbackup_serve",
                               password=PASSWORD, connect_timeout=5)
        with conn.cursor() as cur:  # it keeps serving after both
            cur.execute("SELECT @@GLOBAL.gtid_binlog_pos")
            assert cur.fetchone()[0] == primary[1][-1]
        conn.close()


def test_s3_archive_compressed_and_encrypted(primary, binlog_dir, replica, s3, tmp_path):
    """zstd then age on S3 (moto): refused at start without the identity, served with it."""
    from mysqlbackup.archive.codec import IdentityError, keygen
    server, gtids = primary
    keygen(tmp_path / "id.txt", tmp_path / "id.pub")
    url = s3.bucket("serve-" + os.urandom(4).hex())
    options = {"endpoint_url": s3.endpoint}
    import_directory(ArchiveStore(url, options), str(binlog_dir), "db1", echo=lambda line: None,
                     codec=make_codec("zstd", [str(tmp_path / "id.pub")]))
    with pytest.raises(IdentityError):
        serve(url, storage_options=options)
    with start_server(ServeOptions(url, "db1", password=PASSWORD, storage_options=options,
                                   identity=str(tmp_path / "id.txt"))) as handle:
        attach(replica, handle)
        caught_up(replica, gtids[-1])
        assert checksums(replica) == checksums(server)


def test_follows_the_archive_as_it_grows(primary, binlog_dir, replica, tmp_path, caplog):
    """Files 1-2 and the first transaction of file 3 archived; the replica gets them and
    waits; then the rest of file 3 is archived (a second segment of the newest file)
    while a next file's upload is in flight (its object, no index): nothing is sent
    until the archive is whole again, then the dump goes on from where it stood,
    without a reconnect or an error."""
    server, gtids = primary
    url, rest, _, _ = growing_archive(binlog_dir, tmp_path)
    domain, server_id, seq = gtids[2].split("-")
    with start_server(ServeOptions(url, "db1", ("127.0.0.1", 0), "mysqlbackup_serve", PASSWORD,
                                   poll_interval=0.2)) as handle:
        attach(replica, handle)
        caught_up(replica, f"{domain}-{server_id}-{int(seq) + 1}")
        assert handle.dumps == 1
        assert served_gtid_pos(handle) == f"{domain}-{server_id}-{int(seq) + 1}"
        store = ArchiveStore(url)
        store.put_bytes("db1/binlog/binlog.000004", b"\xfebin")  # its index not written yet
        rest()
        # a poll sees the archive grown but not whole, and nothing is sent (a fixed 0.5 s
        # was too short on a slow machine, where one poll's planning took longer)
        wait_for(lambda: any("cannot be planned yet" in r.getMessage()
                             for r in caplog.records), what="a poll that cannot plan")
        time.sleep(0.5)  # more polls, and time for anything sent wrongly to be applied
        assert replica.execute("SELECT @@gtid_slave_pos")[0][0] != gtids[-1]
        store.remove("db1/binlog/binlog.000004")
        caught_up(replica, gtids[-1])
        assert checksums(replica) == checksums(server)
        assert (handle.dumps, handle.errors) == (1, [])  # the same dump went on
        # the archive's end now, not when serve started
        wait_for(lambda: served_gtid_pos(handle) == gtids[-1], timeout=5,
                 what="@@gtid_binlog_pos at the archive's new end")


def served_gtid_pos(handle):
    """@@gtid_binlog_pos as serve answers a client (PyMySQL)."""
    conn = pymysql.connect(host=handle.host, port=handle.port, user="mysqlbackup_serve",
                           password=PASSWORD, connect_timeout=5)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT @@gtid_binlog_pos")
            return cur.fetchone()[0]
    finally:
        conn.close()


def test_cli_bad_input_and_a_real_run(archive, tmp_path):
    env = dict(os.environ, PYTHONPATH=REPO, MYSQLBACKUP_SERVE_PASSWORD=PASSWORD)

    def cli(*args):
        done = CliRunner().invoke(main, ["serve", *args], env=env)
        return SimpleNamespace(returncode=done.exit_code, stderr=done.stderr)
    done = cli("--listen", "127.0.0.1:1")
    assert (done.returncode, done.stderr) == (2, "mysqlbackup: error: --archive is required\n")
    done = cli("--archive", archive, "--source-name", "nope", "--listen", "127.0.0.1:0")
    assert done.returncode == 10  # ExitCode.NO_SUCH_SOURCE
    assert done.stderr == f"mysqlbackup: error: archive {archive}: no source 'nope' in it (it holds: db1)\n"
    done = cli("--archive", archive, "--listen", "localhost")
    assert done.stderr == ("mysqlbackup: error: bad --listen 'localhost': expected HOST:PORT, "
                           "e.g. 127.0.0.1:3307\n")
    done = cli("--archive", archive, "--require-secure-transport")
    assert (done.returncode, done.stderr) == (2, "mysqlbackup: error: "
                                              "--require-secure-transport needs --ssl-cert "
                                              "(and --ssl-key)\n")
    done = cli("--archive", archive, "--ssl-cert", str(tmp_path / "none.pem"))
    assert (done.returncode, done.stderr) == (2, f"mysqlbackup: error: cannot load the TLS "
                                              f"certificate {tmp_path / 'none.pem'}: No such "
                                              f"file or directory\n")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        done = cli("--archive", archive, "--listen", f"127.0.0.1:{busy}")
    assert (done.returncode, done.stderr) == (2, f"mysqlbackup: error: cannot listen on "
                                              f"127.0.0.1:{busy}: Address already in use\n")
    env["MYSQLBACKUP_SERVE_PASSWORD"] = None
    done = cli("--archive", archive)
    assert (done.returncode, done.stderr) == (2, "mysqlbackup: error: no password for "
                                              "mysqlbackup_serve: set "
                                              "$MYSQLBACKUP_SERVE_PASSWORD or "
                                              "--replica-password-file\n")
    env.pop("MYSQLBACKUP_SERVE_PASSWORD")
    (tmp_path / "pw").write_text(PASSWORD + "\n")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "mysqlbackup", "serve", "--archive", archive,
                             "--listen", f"127.0.0.1:{port}", "--replica-password-file",
                             str(tmp_path / "pw")], env=env, stderr=subprocess.PIPE,
                            text=True)
    try:
        line = proc.stderr.readline()
        assert line == f"serving db1 from {archive} on 127.0.0.1:{port} (user mysqlbackup_serve)\n"
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0


def dump_from(host, port, user, password, start, server_id, semi_sync=False):
    """Every event a dump sends up to and including its first heartbeat, as our own
    replica client sees it (the FDE's in-use flag cleared: the server's active file)."""
    from mysqlbackup.binlog import events as ev
    from mysqlbackup.source import protocol
    from mysqlbackup.source.spec import SourceSpec
    from tests.serve.world import PatientClient

    client = PatientClient(SourceSpec(host, port, user, password), server_id,
                           semi_sync=semi_sync, heartbeat=0.2)
    client.connect()
    try:
        if isinstance(start, str):  # a GTID state
            client._prepare_dump()
            client.query(f"SET @slave_connect_state = '{start}'")
            client._send(protocol.binlog_dump_payload(server_id, "", 4))
            client._new_decoder()
        else:
            client.start_dump(*start)
        out = []
        while not out or out[-1][4] != ev.HEARTBEAT:
            out += [bytearray(e) for e, _ in split_batch(client.read_batch(timeout=5))]
        for event in out:
            if event[4] == ev.FORMAT_DESCRIPTION:
                event[17] &= ~ev.LOG_EVENT_BINLOG_IN_USE_F
        return [bytes(e) for e in out]
    finally:
        client.conn.close()


def test_the_dump_is_byte_for_byte_the_primarys(primary, archive, binlog_dir):
    """Our own replica client dumps from the real primary and from serve, from a
    file's start, from a transaction boundary inside a file, and by GTID from inside a
    file, at a file's end and from nothing: the same events, artificial ones included,
    up to the first heartbeat."""
    from mysqlbackup.binlog import events as ev
    from mysqlbackup.binlog.scan import iter_events
    from mysqlbackup.sandbox import REPL_PASSWORD, REPL_USER
    server, gtids = primary
    data = (binlog_dir / "binlog.000002").read_bytes()
    mid = next(off + len(e) for off, e in iter_events(data, 4, None) if e[4] == ev.XID)
    with serve(archive) as handle:
        starts = [("binlog.000001", 4), ("binlog.000002", mid), gtids[0], gtids[1], ""]
        served = []
        for i, start in enumerate(starts):
            real = dump_from("127.0.0.1", server.port, REPL_USER, REPL_PASSWORD, start, 60 + i)
            ours = dump_from(handle.host, handle.port, "mysqlbackup_serve", PASSWORD, start,
                             70 + i)
            served.append(ours)
            assert [e[4] for e in ours] == [e[4] for e in real], start
            assert ours == real, start
        # a semi-sync replica (@rpl_semi_sync_slave=1): the 0xEF header on every packet
        assert dump_from(handle.host, handle.port, "mysqlbackup_serve", PASSWORD, starts[0],
                         80, semi_sync=True) == served[0]


def test_an_incomplete_tail_is_never_sent(primary, binlog_dir, monkeypatch):
    """The newest file cut inside a transaction (and inside an event): what goes out
    ends with the last whole transaction; the heartbeats name where it ends."""
    from mysqlbackup.binlog import events as ev
    from mysqlbackup.binlog.scan import iter_events
    from replay.planning.selection import Selection
    from replay.planning.units import Unit
    from replay.serve.feed import DumpContext, DumpStart, dump_events
    data = (binlog_dir / "binlog.000003").read_bytes()
    events = list(iter_events(data, 4, None))
    second = [off + len(e) for off, e in events if e[4] == ev.XID][1]
    # where the third transaction starts: a BINLOG_CHECKPOINT the server may have written
    # after the second commit (its timing is the server's) is whole before it, and goes out
    third = next(off for off, e in events if off >= second and e[4] == ev.MARIA_GTID)
    assert all(e[4] == ev.MARIA_BINLOG_CHECKPOINT for off, e in events if second <= off < third)
    monkeypatch.setattr("replay.serve.feed.SPOOL_LIMIT", 60)  # transactions spooled to disk
    for cut in (third + 60, third + 5):  # inside the next transaction / its GTID event
        unit = Unit("binlog.000003", (), {"gtid_before": "", "gtid_after": "0-1-99", "end": cut},
                    True, "binlog.000003", ())
        ctx = DumpContext(lambda u: iter([data[:cut]]), Selection(), 1, True)
        out = list(dump_events([unit], DumpStart("binlog.000003", 4), ctx))
        sent = [e for kind, e in out if kind == "event"]
        assert sent[-1][4] in (ev.XID, ev.MARIA_BINLOG_CHECKPOINT)
        assert ev.parse_header(sent[-1]).log_pos == third
        # after the fake ROTATE: the file's bytes (the in-use flag clear, as a server sends)
        assert b"".join(sent[1:]) == without_in_use(data)[4:third]
        assert (out[-1][1].file, out[-1][1].pos) == ("binlog.000003", third)
